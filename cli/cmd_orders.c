/*
 * cli/cmd_orders.c — hourglass-cli's order view: orders overdue, orders show,
 * orders cancel (contract: cli.h). Everything it shows comes from
 * <hourglass/order_view.h> — the same rows, verdicts and JSON as
 * hourglass-console's /api/orders — on the order database of cli/config.h
 * and the broker connection (opened as every command opens it: the URI,
 * --user, --password-file, --tls-*). The broker is asked when it can be
 * reached; when it cannot (refused, an untrusted certificate, a refused
 * password), the rows still show, each saying why the broker could not be
 * asked. Single-threaded.
 */
#include "cli/cli.h"

#include <hourglass/order_view.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/units.h"
#include "cli/args.h"
#include "cli/output.h"

#define ORDERS_DEFAULT_LIMIT 50
#define ORDERS_MAX_ITEMS     256

/* The broker as the order view asks it: the client for FIND, or NULL with
 * why it cannot be asked (the library's words, or after a failure midway
 * "not asked: …"). */
typedef struct broker_half {
    hg_client_t *client;
    char why[CLI_WHY_MAX];
    uint64_t failed_order; /* the order whose FIND found the broker gone (0: none) */
    size_t not_asked;      /* the rows after it, not asked */
} broker_half_t;

/* Open the broker once for a command, as every other command does
 * (cli_open_client: --user, --password-file, --tls-*). A broker that cannot
 * be reached or refuses the login leaves b->client NULL and the reason in
 * b->why: the rows still show, each saying why. Returns 0, or EXIT_USAGE
 * with the message printed for a bad --user, --password-file or URI (the
 * command line is wrong, not the broker). */
static int broker_open(cli_t *cli, broker_half_t *b)
{
    int rc = cli_open_client(cli, b->why, sizeof b->why);

    b->client = cli->client;
    b->failed_order = 0;
    b->not_asked = 0;
    if (rc == EXIT_USAGE)
        return cli_fail(rc, "%s", b->why);
    return 0;
}

/* hg_order_explain with b's client; without one, the verdict names why the
 * broker could not be asked instead of the library's "no broker connection".
 * After a failure to reach the broker (no answer, a lost connection, no
 * reconnect) the rest go without it, as the console's view does: each
 * would wait for the broker again, up to --timeout and the reconnects. */
static void explain(cli_t *cli, broker_half_t *b, const hg_order_info_t *order, hg_order_view_t *v)
{
    hg_order_explain(b->client, cli->conf.order_topic, order, v);
    if (b->client == NULL && order != NULL) {
        b->not_asked += b->failed_order != 0;
        snprintf(v->broker_error, sizeof v->broker_error, "%.*s", (int)sizeof v->broker_error - 1, b->why);
        hg_order_late_classify(v);
        return;
    }
    hg_err_t e = b->client != NULL ? hg_client_errcode(b->client) : HG_OK;
    if (order != NULL && !v->broker_known && (e == HG_ERR_TIMEOUT || e == HG_ERR_IO || e == HG_ERR_CONNECT)) {
        b->client = NULL;
        b->failed_order = order->id;
        snprintf(b->why, sizeof b->why, "skipped after the failure for order %" PRIu64 ": %.*s", order->id,
                 (int)sizeof b->why / 2, v->broker_error);
    }
}

static void print_outbox(const hg_order_info_t *o, char *buf, size_t len)
{
    if (!o->has_outbox)
        snprintf(buf, len, "none");
    else
        snprintf(buf, len, "%s/%u", o->outbox_status, o->outbox_attempts);
}

/* The messages of a view as "id state where" joined by "; ". */
static char *messages_text(const hg_order_view_t *v)
{
    size_t cap = 64 + v->msg_count * 256;
    char *s = xmalloc(cap);
    size_t n = 0;

    s[0] = '\0';
    if (!v->broker_known)
        snprintf(s, cap, "?");
    else if (v->msg_count == 0)
        snprintf(s, cap, "none");
    for (size_t i = 0; v->broker_known && i < v->msg_count; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s%s %s (%s)", i > 0 ? "; " : "", v->msgs[i].id, v->msgs[i].state,
                              v->msgs[i].where);
    return s;
}

int cli_cmd_orders_overdue(cli_t *cli, int argc, char **argv)
{
    static const char *const header[] = { "ORDER", "EXPIRED", "OVERDUE", "OUTBOX", "MESSAGE", "LATE", "WHY" };
    static const int right[] = { 1, 0, 1, 0, 0, 0, 0 };
    cli_opt_t specs[] = {
        { "--older-than", 1, NULL }, { "--limit", 1, NULL }, { "--after", 1, NULL }, { NULL, 0, NULL }
    };
    char *pos[1], why[200], next[HG_ORDER_CURSOR_MAX], buf[64];
    uint64_t older = 0, limit = ORDERS_DEFAULT_LIMIT;
    hg_order_error_t err;
    size_t n = 0;
    int rc = 0, npos = cli_parse_args(cli_find_command("orders overdue"), argc, argv, specs, pos, 0, &rc);

    if (npos < 0)
        return rc;
    if (specs[0].value != NULL && units_parse_duration_str(specs[0].value, UNITS_BARE_MS, &older, why, sizeof why) < 0)
        return cli_usage_error("orders overdue: --older-than '%s' is not a duration: %s", specs[0].value, why);
    if (specs[1].value != NULL &&
        (cli_parse_u64(specs[1].value, &limit) < 0 || limit == 0 || limit > HG_ORDER_PAGE_MAX))
        return cli_usage_error("orders overdue: --limit '%s' is not a number 1..%d", specs[1].value, HG_ORDER_PAGE_MAX);
    if ((rc = cli_orders_db(cli)) != 0)
        return rc;
    broker_half_t broker;
    if ((rc = broker_open(cli, &broker)) != 0)
        return rc;
    hg_order_info_t *rows = xcalloc(limit, sizeof *rows);
    if (hg_order_overdue(cli->orders, older, specs[2].value, limit, rows, &n, next, &err) < 0) {
        free(rows);
        return cli_fail(err.code == 0 ? EXIT_USAGE : EXIT_CONNECT, "orders overdue: %s", err.message);
    }
    hg_order_view_t *views = xcalloc(n > 0 ? n : 1, sizeof *views);
    for (size_t i = 0; i < n; i++)
        explain(cli, &broker, &rows[i], &views[i]);
    if (broker.not_asked > 0) /* once, not per row: the rows say it too */
        fprintf(stderr,
                "orders overdue: the broker did not answer for order %" PRIu64 "; the %zu order%s after it %s\n",
                broker.failed_order, broker.not_asked, broker.not_asked == 1 ? "" : "s",
                broker.not_asked == 1 ? "was not asked" : "were not asked");
    if (cli->json) {
        printf("{\"orders\":[");
        for (size_t i = 0; i < n; i++) {
            char *js = hg_order_view_json(&views[i], NULL, 0);
            printf("%s%s", i > 0 ? "," : "", js);
            free(js);
        }
        printf("],\"next\":");
        if (next[0] != '\0')
            out_json_string(stdout, next, strlen(next));
        else
            printf("null");
        printf("}\n");
    } else if (n == 0) {
        printf("no overdue orders%s\n", specs[0].value != NULL ? " older than that" : "");
    } else {
        table_t t;
        table_init(&t, 7, header, right);
        for (size_t i = 0; i < n; i++) {
            const hg_order_view_t *v = &views[i];
            table_addf(&t, "%" PRIu64, v->order.id);
            out_time(v->order.expire_ms, buf, sizeof buf);
            table_add(&t, buf);
            hg_order_age_text(v->order.overdue_ms, buf, sizeof buf);
            table_add(&t, buf);
            print_outbox(&v->order, buf, sizeof buf);
            table_add(&t, buf);
            table_add_owned(&t, messages_text(v));
            table_add(&t, hg_order_late_name(v->late));
            table_add_owned(&t, out_text(v->why, strlen(v->why), 0));
        }
        table_print(&t, stdout);
        table_free(&t);
        if (next[0] != '\0')
            printf("more: hourglass-cli orders overdue --after %s%s%s\n", next, specs[0].value ? " --older-than " : "",
                   specs[0].value ? specs[0].value : "");
    }
    free(views);
    free(rows);
    return 0;
}

/* ORDER ID positional → *id; usage error otherwise. */
static int order_id_arg(const char *name, const char *text, uint64_t *id)
{
    char why[160];
    if (hg_order_parse_id(text, strlen(text), id, why, sizeof why) < 0)
        return cli_usage_error("%s: '%s' is not an order id (%s)", name, text, why);
    return 0;
}

/* Look up, explain (with broker, from broker_open) and print one order
 * (orders show, and after a cancel). */
static int show_order(cli_t *cli, broker_half_t *broker, uint64_t id, const char *outcome)
{
    hg_order_item_t *items = xcalloc(ORDERS_MAX_ITEMS, sizeof *items);
    hg_order_info_t info;
    hg_order_view_t v;
    hg_order_error_t err;
    size_t nitems = 0;
    char buf[64], *text;

    int found = hg_order_lookup(cli->orders, id, &info, items, ORDERS_MAX_ITEMS, &nitems, &err);
    if (found <= 0) {
        free(items);
        if (found < 0)
            return cli_fail(EXIT_CONNECT, "order %" PRIu64 ": %s", id, err.message);
        return cli_fail(EXIT_BROKER, "no order %" PRIu64 " in the database", id);
    }
    explain(cli, broker, &info, &v);
    if (cli->json) {
        char *js = hg_order_view_json(&v, items, nitems);
        if (outcome != NULL) {
            printf("{\"outcome\":");
            out_json_string(stdout, outcome, strlen(outcome));
            printf(",\"order\":%s}\n", js);
        } else {
            printf("%s\n", js);
        }
        free(js);
        free(items);
        return 0;
    }
    if (outcome != NULL)
        printf("outcome:       %s\n", outcome);
    printf("order:         %" PRIu64 " (user %" PRIu64 ")\n", info.id, info.user_id);
    printf("status:        %s\n", info.status);
    out_time(info.created_ms, buf, sizeof buf);
    printf("created:       %s\n", buf);
    out_time(info.expire_ms, buf, sizeof buf);
    printf("expires:       %s\n", buf);
    if (info.paid_ms != 0) {
        out_time(info.paid_ms, buf, sizeof buf);
        printf("paid:          %s\n", buf);
    }
    if (info.cancelled_ms != 0) {
        out_time(info.cancelled_ms, buf, sizeof buf);
        text = out_text(info.cancel_reason, strlen(info.cancel_reason), 0);
        printf("cancelled:     %s, reason %s\n", buf, text[0] ? text : "-");
        free(text);
    }
    printf("items:        ");
    for (size_t i = 0; i < nitems; i++)
        printf(" sku %" PRIu64 " x%lld%s", items[i].sku_id, items[i].qty, i + 1 < nitems ? "," : "");
    printf("%s\n", nitems == 0 ? " none" : "");
    if (info.has_outbox) {
        out_time(info.outbox_next_attempt_ms, buf, sizeof buf);
        text = out_text(info.outbox_last_error, strlen(info.outbox_last_error), 0);
        printf("outbox:        %s, %u attempts, next attempt %s%s%s\n", info.outbox_status, info.outbox_attempts, buf,
               text[0] ? ", last error: " : "", text);
        free(text);
    } else {
        printf("outbox:        no row\n");
    }
    if (!v.broker_known)
        printf("messages:      unknown (%s)\n", v.broker_error);
    else if (v.msg_count == 0)
        printf("messages:      none in the broker\n");
    for (size_t i = 0; v.broker_known && i < v.msg_count; i++) {
        out_time(v.msgs[i].due_ms, buf, sizeof buf);
        text = out_text(v.msgs[i].detail, strlen(v.msgs[i].detail), 0);
        printf("%s %s %s in %s, due %s, %u failures%s%s\n", i == 0 ? "messages:     " : "              ", v.msgs[i].id,
               v.msgs[i].state, v.msgs[i].where, buf, v.msgs[i].reconsume, text[0] ? "; " : "", text);
        free(text);
    }
    printf("late:          %s — %s\n", hg_order_late_name(v.late), v.why);
    free(items);
    return 0;
}

int cli_cmd_orders_show(cli_t *cli, int argc, char **argv)
{
    char *pos[1];
    uint64_t id;
    int rc = 0, n = cli_parse_args(cli_find_command("orders show"), argc, argv, NULL, pos, 1, &rc);

    if (n < 0)
        return rc;
    if (n < 1)
        return cli_usage_error("orders show: needs an order ID");
    if ((rc = order_id_arg("orders show", pos[0], &id)) != 0)
        return rc;
    broker_half_t broker;
    if ((rc = cli_orders_db(cli)) != 0 || (rc = broker_open(cli, &broker)) != 0)
        return rc;
    return show_order(cli, &broker, id, NULL);
}

int cli_cmd_orders_cancel(cli_t *cli, int argc, char **argv)
{
    cli_opt_t specs[] = { { "--reason", 1, NULL }, { NULL, 0, NULL } };
    char *pos[1];
    uint64_t id;
    hg_order_outcome_t outcome;
    hg_order_error_t err;
    int rc = 0, n = cli_parse_args(cli_find_command("orders cancel"), argc, argv, specs, pos, 1, &rc);

    if (n < 0)
        return rc;
    if (n < 1)
        return cli_usage_error("orders cancel: needs an order ID");
    if ((rc = order_id_arg("orders cancel", pos[0], &id)) != 0)
        return rc;
    if (specs[0].value != NULL && (specs[0].value[0] == '\0' || strlen(specs[0].value) > 64))
        return cli_usage_error("orders cancel: --reason must be 1..64 bytes, got %zu", strlen(specs[0].value));
    broker_half_t broker; /* before the cancel: a bad --user must not fail a cancel already done */
    if ((rc = cli_orders_db(cli)) != 0 || (rc = broker_open(cli, &broker)) != 0)
        return rc;
    if (hg_order_manual_cancel(cli->orders, id, specs[0].value, &outcome, &err) < 0)
        return cli_fail(outcome == HG_ORDER_TRANSIENT ? EXIT_CONNECT : EXIT_BROKER,
                        "orders cancel %" PRIu64 ": %s (%s; nothing changed)", id, err.message,
                        hg_order_outcome_name(outcome));
    if (outcome == HG_ORDER_NOT_FOUND) {
        if (cli->json)
            printf("{\"outcome\":\"not-found\",\"order\":null}\n");
        return cli_fail(EXIT_BROKER, "orders cancel: no order %" PRIu64 " in the database", id);
    }
    return show_order(cli, &broker, id, hg_order_outcome_name(outcome));
}
