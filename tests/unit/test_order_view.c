/*
 * tests/unit/test_order_view.c — CUnit suites for the order view's pure
 * parts and the JSON writer they print with:
 *   verdict  hg_order_late_classify: every verdict, first match wins (DLQ
 *            over lagging over delayed), not pending / not due, the broker
 *            unknown, a DLQ sentence cut to fit why; hg_order_late_name for
 *            every value
 *   age      hg_order_age_text: seconds, minutes, hours, days, negative
 *   json     base/json.h: nesting and commas, escapes (quotes, control
 *            characters, <>&, bytes that are not UTF-8, valid UTF-8 kept),
 *            numbers, null; hg_order_view_json's document
 * The database and broker halves are tested through the programs
 * (tests/integration/test_cli_orders, test_console).
 */
#include "base/buf.h"
#include "base/json.h"
#include "include/hourglass/order_view.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A pending order overdue by overdue_ms with its outbox row in status. */
static void pending(hg_order_view_t *v, int64_t overdue_ms, const char *outbox)
{
    memset(v, 0, sizeof *v);
    v->order.id = 42;
    snprintf(v->order.status, sizeof v->order.status, "pending");
    v->order.overdue_ms = overdue_ms;
    if (outbox != NULL) {
        v->order.has_outbox = 1;
        snprintf(v->order.outbox_status, sizeof v->order.outbox_status, "%s", outbox);
    }
    v->broker_known = 1;
}

static void add_msg(hg_order_view_t *v, const char *state, const char *where, const char *detail)
{
    hg_order_msg_t *m = &v->msgs[v->msg_count++];
    snprintf(m->id, sizeof m->id, "00000000000000%02zx", v->msg_count);
    snprintf(m->state, sizeof m->state, "%s", state);
    snprintf(m->where, sizeof m->where, "%s", where);
    snprintf(m->detail, sizeof m->detail, "%s", detail);
}

static void verdict(hg_order_view_t *v, hg_order_late_t want, const char *why_has, int line)
{
    hg_order_late_classify(v);
    TU_CHECK_AT(v->late == want, line, "late %s, want %s (why: %s)", hg_order_late_name(v->late),
                hg_order_late_name(want), v->why);
    TU_CHECK_AT(strstr(v->why, why_has) != NULL, line, "why '%s' lacks '%s'", v->why, why_has);
}
#define VERDICT(v, want, has) verdict(v, want, has, __LINE__)

static void test_verdicts(void)
{
    hg_order_view_t v;

    pending(&v, 65000, "sent");
    VERDICT(&v, HG_ORDER_LATE_NO_MESSAGE, "1m05s overdue; the outbox row is 'sent'");
    TU_CHECK(strstr(v.why, "lost") != NULL, "the lost message is called lost: %s", v.why);
    pending(&v, 65000, "new");
    VERDICT(&v, HG_ORDER_LATE_NOT_SENT, "the outbox row is still 'new'");
    pending(&v, 65000, NULL);
    VERDICT(&v, HG_ORDER_LATE_NOT_SENT, "no outbox row");
    pending(&v, 65000, "sent");
    add_msg(&v, "delayed", "level 17", "");
    VERDICT(&v, HG_ORDER_LATE_DELAYED, "still delayed in level 17");
    add_msg(&v, "leased", "group order-cancel", "");
    VERDICT(&v, HG_ORDER_LATE_CONSUMER_LAG, "the consumer is lagging");
    add_msg(&v, "dlq", "group order-cancel", "lock wait timeout");
    VERDICT(&v, HG_ORDER_LATE_IN_DLQ, "parked in the DLQ of group order-cancel: lock wait timeout");
    pending(&v, 65000, "sent");
    add_msg(&v, "ready", "topic order-timeout", "");
    VERDICT(&v, HG_ORDER_LATE_CONSUMER_LAG, "ready in topic order-timeout");
    pending(&v, 65000, "sent");
    add_msg(&v, "retry", "group g", "");
    VERDICT(&v, HG_ORDER_LATE_CONSUMER_LAG, "retry");

    pending(&v, 65000, "sent");
    v.broker_known = 0;
    snprintf(v.broker_error, sizeof v.broker_error, "connection refused");
    VERDICT(&v, HG_ORDER_LATE_UNKNOWN, "could not be asked: connection refused");
    pending(&v, -90000, "sent");
    VERDICT(&v, HG_ORDER_LATE_NONE, "not due yet: it expires in 1m30s");
    pending(&v, 65000, "done");
    snprintf(v.order.status, sizeof v.order.status, "cancelled");
    snprintf(v.order.cancel_reason, sizeof v.order.cancel_reason, "manual");
    VERDICT(&v, HG_ORDER_LATE_NONE, "the order is cancelled (reason manual)");
    snprintf(v.order.status, sizeof v.order.status, "paid");
    v.order.cancel_reason[0] = '\0';
    VERDICT(&v, HG_ORDER_LATE_NONE, "the order is paid");

    /* The longest group name and a long DLQ reason do not fit in why: cut, the cut shown, no half UTF-8 character. */
    char name[HG_NAME_MAX], reason[2 * 150 + 1];
    memset(name, 'g', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    for (size_t i = 0; i < sizeof reason - 1; i += 2)
        memcpy(reason + i, "\xc3\xa9", 2); /* é */
    reason[sizeof reason - 1] = '\0';
    pending(&v, 65000, "sent");
    add_msg(&v, "dlq", name, reason);
    VERDICT(&v, HG_ORDER_LATE_IN_DLQ, "parked in the DLQ of gggg");
    size_t len = strlen(v.why);
    const char *end = v.why + (len > 10 ? len - 10 : 0);
    TU_CHECK(len >= sizeof v.why - 5 && len <= sizeof v.why - 1, "why is %zu bytes of %zu", len, sizeof v.why);
    TU_CHECK(len >= 3 && strcmp(v.why + len - 3, "...") == 0, "the cut is shown: ...%s", end);
    TU_CHECK(len >= 5 && memcmp(v.why + len - 5, "\xc3\xa9...", 5) == 0, "a whole é before the cut: ...%s", end);

    static const char *const names[] = { "none",   "unknown", "not-sent",        "no-message",
                                         "in-dlq", "delayed", "consumer-lagging" };
    for (int i = 0; i <= HG_ORDER_LATE_CONSUMER_LAG; i++)
        TU_CHECK(strcmp(hg_order_late_name((hg_order_late_t)i), names[i]) == 0, "name of %d: %s", i,
                 hg_order_late_name((hg_order_late_t)i));
    TU_CHECK(strcmp(hg_order_late_name((hg_order_late_t)99), "?") == 0, "outside the enum: ?");
}

static void test_age(void)
{
    static const struct {
        int64_t ms;
        const char *want;
    } cases[] = {
        { 0, "0s" },           { 999, "0s" },         { 59999, "59s" },       { 60000, "1m00s" },
        { 3599000, "59m59s" }, { 3600000, "1h00m" },  { 86399000, "23h59m" }, { 90000000, "1d01h" },
        { -1000, "-1s" },      { -125000, "-2m05s" }, { -500, "0s" },
    };
    char buf[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        TU_CHECK(strcmp(hg_order_age_text(cases[i].ms, buf, sizeof buf), cases[i].want) == 0,
                 "%lld ms: '%s', want '%s'", (long long)cases[i].ms, buf, cases[i].want);
}

static void test_json_writer(void)
{
    buf_t b = BUF_INIT;
    json_t j;
    json_init(&j, &b);
    json_object_open(&j);
    json_kstr(&j, "a", "x\"y\\z\n\t\x01<b>&");
    json_key(&j, "list");
    json_array_open(&j);
    json_int(&j, -3);
    json_uint(&j, 18446744073709551615ULL);
    json_bool(&j, 1);
    json_null(&j);
    json_str(&j, NULL);
    json_double(&j, 0.5);
    json_array_open(&j);
    json_array_close(&j);
    json_object_open(&j);
    json_object_close(&j);
    json_array_close(&j);
    json_key(&j, "bytes");
    json_strn(&j, "caf\xc3\xa9 \xff\xc3", 8);
    json_kbool(&j, "f", 0);
    json_kuint_or_null(&j, "never_ms", 0);
    json_kuint_or_null(&j, "at_ms", 1767225600123ULL);
    json_object_close(&j);
    const char *want =
        "{\"a\":\"x\\\"y\\\\z\\n\\t\\u0001\\u003cb\\u003e\\u0026\","
        "\"list\":[-3,18446744073709551615,true,null,null,0.5,[],{}],"
        "\"bytes\":\"caf\xc3\xa9 \\u00ff\\u00c3\",\"f\":false,\"never_ms\":null,\"at_ms\":1767225600123}";
    TU_CHECK(strcmp(buf_cstr(&b), want) == 0, "json:\n got %s\nwant %s", buf_cstr(&b), want);
    buf_free(&b);
    TU_CHECK(json_utf8_len((const unsigned char *)"\xe2\x82\xac", 3) == 3, "a 3-byte sequence");
    TU_CHECK(json_utf8_len((const unsigned char *)"\xc0\xaf", 2) == 0, "an overlong encoding is not UTF-8");
    TU_CHECK(json_utf8_len((const unsigned char *)"\xed\xa0\x80", 3) == 0, "a surrogate is not UTF-8");
}

static void test_view_json(void)
{
    hg_order_view_t v;
    hg_order_item_t items[2] = { { 7, 2 }, { 9, 1 } };
    pending(&v, 65000, "sent");
    v.order.expire_ms = 1000;
    v.order.outbox_attempts = 1;
    snprintf(v.order.cursor, sizeof v.order.cursor, "20260101000000000000-42");
    add_msg(&v, "dlq", "group order-cancel", "boom <x>");
    hg_order_late_classify(&v);
    char *js = hg_order_view_json(&v, items, 2);
    const char *head = "{\"id\":42,\"user_id\":0,\"status\":\"pending\",\"created_ms\":null,\"expire_ms\":1000,";
    TU_CHECK(strncmp(js, head, strlen(head)) == 0, "head: %s", js);
    TU_CHECK(strstr(js, "\"cancel_reason\":null,\"overdue_ms\":65000,\"cursor\":\"20260101000000000000-42\"") != NULL,
             "null reason, overdue, cursor: %s", js);
    TU_CHECK(
        strstr(js, "\"outbox\":{\"status\":\"sent\",\"attempts\":1,\"next_attempt_ms\":null,\"last_error\":null}") !=
            NULL,
        "outbox: %s", js);
    TU_CHECK(strstr(js, "\"items\":[{\"sku_id\":7,\"qty\":2},{\"sku_id\":9,\"qty\":1}]") != NULL, "items: %s", js);
    TU_CHECK(strstr(js, "\"detail\":\"boom \\u003cx\\u003e\"") != NULL, "detail escaped: %s", js);
    TU_CHECK(strstr(js, "\"late\":\"in-dlq\",\"why\":\"1m05s overdue;") != NULL, "verdict: %s", js);
    free(js);
    v.order.has_outbox = 0;
    js = hg_order_view_json(&v, NULL, 0);
    TU_CHECK(strstr(js, "\"outbox\":null") != NULL && strstr(js, "\"items\"") == NULL, "no outbox, no items: %s", js);
    free(js);
}

static const tu_test_t view_tests[] = {
    { "verdicts", test_verdicts },
    { "age text", test_age },
    { "view JSON", test_view_json },
    { NULL, NULL },
};

static const tu_test_t json_tests[] = {
    { "writer, escapes, UTF-8", test_json_writer },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "verdict", view_tests },
    { "json", json_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
