/*
 * cli/cmd_dlq.c — hourglass-cli's dead-letter commands: dlq list, show,
 * requeue, drop (contract: cli.h). There is no "DLQ GET": show lists one
 * entry after the id's predecessor. Single-threaded.
 */
#include "cli/cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/output.h"

#define CLI_PAYLOAD_COLUMN  40    /* payload characters shown in dlq list */
#define CLI_DLQ_ALL_PAGE    "500" /* entries per DLQ LIST of dlq list --all */
#define CLI_DLQ_ANNOUNCE_MS 300   /* dlq requeue|drop --all: no reply by then, announce the wait */

/* The fields of one DLQ LIST entry [id, key, payload, reconsume, reason, parked_ms]. */
typedef struct dlq_entry {
    const char *id, *key, *payload, *reason;
    size_t id_len, key_len, payload_len, reason_len;
    long long reconsume, parked_ms;
} dlq_entry_t;

static int dlq_entry(const hg_reply_t *e, dlq_entry_t *d)
{
    if (hg_reply_count(e) < 6)
        return -1;
    for (size_t i = 0; i < 6; i++) {
        const hg_reply_t *x = hg_reply_element(e, i);
        if ((i == 3 || i == 5) ? !reply_is_int(x) : !reply_is_str(x))
            return -1;
    }
    d->id = hg_reply_str(hg_reply_element(e, 0), &d->id_len);
    d->key = hg_reply_str(hg_reply_element(e, 1), &d->key_len);
    d->payload = hg_reply_str(hg_reply_element(e, 2), &d->payload_len);
    d->reconsume = hg_reply_integer(hg_reply_element(e, 3));
    d->reason = hg_reply_str(hg_reply_element(e, 4), &d->reason_len);
    d->parked_ms = hg_reply_integer(hg_reply_element(e, 5));
    return 0;
}

static void dlq_json(const dlq_entry_t *d)
{
    fputs("{\"id\":", stdout);
    out_json_string(stdout, d->id, d->id_len);
    fputs(",\"key\":", stdout);
    out_json_string(stdout, d->key, d->key_len);
    fputs(",\"payload\":", stdout);
    out_json_string(stdout, d->payload, d->payload_len);
    printf(",\"reconsume\":%lld,\"reason\":", d->reconsume);
    out_json_string(stdout, d->reason, d->reason_len);
    printf(",\"parked_ms\":%lld}", d->parked_ms);
}

/* DLQ LIST group [COUNT n] [AFTER id]; *reply is the array. */
static int dlq_list_reply(cli_t *cli, const char *group, const char *count, const char *after, hg_reply_t **reply)
{
    const char *cmdv[7] = { "DLQ", "LIST", group };
    int argc = 3, rc;

    if (count != NULL) {
        cmdv[argc++] = "COUNT";
        cmdv[argc++] = count;
    }
    if (after != NULL) {
        cmdv[argc++] = "AFTER";
        cmdv[argc++] = after;
    }
    if ((rc = cli_run(cli, reply, argc, cmdv)) != 0)
        return rc;
    if (hg_reply_type(*reply) != HG_REPLY_ARRAY) {
        hg_reply_free(*reply);
        *reply = NULL;
        return cli_unexpected("DLQ LIST", NULL);
    }
    for (size_t i = 0; i < hg_reply_count(*reply); i++) {
        dlq_entry_t d;
        if (dlq_entry(hg_reply_element(*reply, i), &d) < 0) {
            hg_reply_free(*reply);
            *reply = NULL;
            return cli_unexpected("DLQ LIST", NULL);
        }
    }
    return 0;
}

/* Add one page's entries to the table (or print them as JSON elements). */
static void list_page(cli_t *cli, const hg_reply_t *r, table_t *t, size_t *printed)
{
    char buf[64];

    for (size_t i = 0; i < hg_reply_count(r); i++) {
        dlq_entry_t d;
        dlq_entry(hg_reply_element(r, i), &d);
        if (cli->json) {
            if ((*printed)++ > 0)
                fputc(',', stdout);
            dlq_json(&d);
            continue;
        }
        (*printed)++;
        table_add_owned(t, out_text(d.id, d.id_len, 0));
        table_add_owned(t, out_text(d.key, d.key_len, 24));
        table_addf(t, "%lld", d.reconsume);
        out_time((uint64_t)d.parked_ms, buf, sizeof(buf));
        table_add(t, buf);
        table_add_owned(t, out_text(d.reason, d.reason_len, 48));
        table_add_owned(t, out_text(d.payload, d.payload_len, CLI_PAYLOAD_COLUMN));
    }
}

/* The id of the last entry of a page into id[HG_ID_MAX] ("" when empty). */
static void last_id(const hg_reply_t *r, char *id)
{
    dlq_entry_t d;
    id[0] = '\0';
    if (hg_reply_count(r) > 0 && dlq_entry(hg_reply_element(r, hg_reply_count(r) - 1), &d) == 0)
        snprintf(id, HG_ID_MAX, "%.*s", (int)d.id_len, d.id);
}

int cli_cmd_dlq_list(cli_t *cli, int argc, char **argv)
{
    static const char *const header[6] = { "ID", "KEY", "RECONSUME", "PARKED", "REASON", "PAYLOAD" };
    static const int right[6] = { 0, 0, 1, 0, 0, 0 };
    cli_opt_t specs[] = { { "--count", 1, NULL }, { "--after", 1, NULL }, { "--all", 0, NULL }, { NULL, 0, NULL } };
    char *pos[1], after[HG_ID_MAX] = "", page_count[24];
    uint64_t v;
    hg_reply_t *r;
    table_t t;
    size_t printed = 0;
    int more = 0, rc = 0, n = cli_parse_args(cli_find_command("dlq list"), argc, argv, specs, pos, 1, &rc);

    if (n < 0)
        return rc;
    if (n < 1)
        return cli_usage_error("dlq list: needs GROUP");
    if (specs[0].value != NULL && (cli_parse_u64(specs[0].value, &v) < 0 || v == 0))
        return cli_usage_error("dlq list: --count '%s' is not a positive number", specs[0].value);
    if (specs[1].value != NULL && cli_parse_id(specs[1].value, &v) < 0)
        return cli_usage_error("dlq list: --after '%s' is not a message id (16 hex digits)", specs[1].value);
    if (specs[0].value != NULL && specs[2].value != NULL)
        return cli_usage_error("dlq list: --all pages by itself; give --count or --all, not both");
    if (specs[1].value != NULL)
        snprintf(after, sizeof after, "%s", specs[1].value);
    snprintf(page_count, sizeof page_count, "%s",
             specs[0].value != NULL   ? specs[0].value
             : specs[2].value != NULL ? CLI_DLQ_ALL_PAGE
                                      : "100");
    if (!cli->json)
        table_init(&t, 6, header, right);
    else
        fputc('[', stdout);
    for (;;) {
        size_t want = (size_t)strtoull(page_count, NULL, 10);
        if ((rc = dlq_list_reply(cli, pos[0], page_count, after[0] ? after : NULL, &r)) != 0)
            break;
        list_page(cli, r, &t, &printed);
        last_id(r, after);
        size_t got = hg_reply_count(r);
        hg_reply_free(r);
        if (got < want || after[0] == '\0')
            break;
        if (specs[2].value != NULL) {
            fprintf(stderr, "dlq list %s: %zu listed…\n", pos[0], printed);
            continue;
        }
        /* A full page: is there more after it? */
        if ((rc = dlq_list_reply(cli, pos[0], "1", after, &r)) != 0)
            break;
        more = hg_reply_count(r) > 0;
        hg_reply_free(r);
        break;
    }
    if (cli->json) {
        fputs("]\n", stdout);
    } else {
        if (rc == 0 && printed == 0)
            printf("the DLQ of group %s is empty%s\n", pos[0], specs[1].value != NULL ? " after that id" : "");
        else if (rc == 0)
            table_print(&t, stdout);
        table_free(&t);
    }
    if (rc == 0 && more)
        fprintf(cli->json ? stderr : stdout, "more: hourglass-cli dlq list %s --after %s%s%s (or --all)\n", pos[0],
                after, specs[0].value ? " --count " : "", specs[0].value ? specs[0].value : "");
    if (rc == 0 && specs[2].value != NULL)
        fprintf(stderr, "dlq list %s: %zu listed, done\n", pos[0], printed);
    return rc;
}

int cli_cmd_dlq_show(cli_t *cli, int argc, char **argv)
{
    char *pos[2], after[24], buf[64], *text;
    const hg_reply_t *found = NULL;
    hg_reply_t *r;
    uint64_t id;
    dlq_entry_t d;
    int rc = 0, n = cli_parse_args(cli_find_command("dlq show"), argc, argv, NULL, pos, 2, &rc);

    if (n < 0)
        return rc;
    if (n < 2)
        return cli_usage_error("dlq show: needs GROUP and ID");
    if (cli_parse_id(pos[1], &id) < 0)
        return cli_usage_error("dlq show: '%s' is not a message id (16 hex digits)", pos[1]);
    /* There is no "DLQ GET": list one entry after the id's predecessor. */
    snprintf(after, sizeof(after), "%016" PRIx64, id - 1);
    if ((rc = dlq_list_reply(cli, pos[0], "1", id > 0 ? after : NULL, &r)) != 0)
        return rc;
    if (hg_reply_count(r) == 1) {
        uint64_t got;
        dlq_entry(hg_reply_element(r, 0), &d);
        text = out_text(d.id, d.id_len, 0);
        if (cli_parse_id(text, &got) == 0 && got == id)
            found = hg_reply_element(r, 0);
        free(text);
    }
    if (found == NULL) {
        hg_reply_free(r);
        return cli_fail(EXIT_BROKER, "no message %s in the DLQ of group %s", pos[1], pos[0]);
    }
    if (cli->json) {
        dlq_json(&d);
        fputc('\n', stdout);
    } else {
        printf("id:        %.*s\n", (int)d.id_len, d.id);
        text = out_text(d.key, d.key_len, 0);
        printf("key:       %s\n", text);
        free(text);
        printf("reconsume: %lld\n", d.reconsume);
        out_time((uint64_t)d.parked_ms, buf, sizeof(buf));
        printf("parked:    %s (%lld)\n", buf, d.parked_ms);
        text = out_text(d.reason, d.reason_len, 0);
        printf("reason:    %s\n", text);
        free(text);
        text = out_text(d.payload, d.payload_len, 0);
        printf("payload:   %s\n", text);
        free(text);
    }
    hg_reply_free(r);
    return 0;
}

/* What dlq requeue|drop --all announces when the move is slow. */
typedef struct announce {
    const char *name, *group, *done;
    long long len; /* DLQ LEN before the move */
} announce_t;

static void announce_move(void *arg)
{
    const announce_t *a = arg;
    fprintf(stderr, "%s %s: %lld message%s in the DLQ, waiting until %s %s…\n", a->name, a->group, a->len,
            a->len == 1 ? "" : "s", a->len == 1 ? "it is" : "all are", a->done);
}

/* dlq requeue / dlq drop: DLQ <verb> group id|ALL → integer. */
static int dlq_move(cli_t *cli, const char *name, const char *verb, const char *done, int argc, char **argv)
{
    cli_opt_t specs[] = { { "--all", 0, NULL }, { NULL, 0, NULL } };
    const char *cmdv[4] = { "DLQ", verb, NULL, NULL };
    char *pos[2];
    uint64_t id;
    hg_reply_t *r;
    long long moved;
    int rc = 0, n = cli_parse_args(cli_find_command(name), argc, argv, specs, pos, 2, &rc);

    if (n < 0)
        return rc;
    if (n < 1)
        return cli_usage_error("%s: needs GROUP", name);
    if ((n == 2) == (specs[0].value != NULL))
        return cli_usage_error("%s: give either one message ID or --all", name);
    if (n == 2 && cli_parse_id(pos[1], &id) < 0)
        return cli_usage_error("%s: '%s' is not a message id (16 hex digits)", name, pos[1]);
    cmdv[2] = pos[0];
    cmdv[3] = n == 2 ? pos[1] : "ALL";
    if (n != 2) {
        /* The broker refuses at once (NOPERM, no such group) but answers an ALL it
         * accepted after its last step: announce the wait only when the reply is
         * slow, with how many there were before the move. */
        const char *lenv[3] = { "DLQ", "LEN", pos[0] };
        announce_t a = { name, pos[0], done, 0 };
        if ((rc = cli_run(cli, &r, 3, lenv)) != 0)
            return rc;
        a.len = reply_is_int(r) ? hg_reply_integer(r) : 0;
        hg_reply_free(r);
        /* the reply comes after the last of the broker's steps: wait longer for it */
        hg_client_set_read_timeout(cli->client, hg_dlq_all_read_timeout(cli->timeout_ms, a.len));
        rc = cli_run_notice(cli, &r, 4, cmdv, CLI_DLQ_ANNOUNCE_MS, announce_move, &a);
    } else {
        rc = cli_run(cli, &r, 4, cmdv);
    }
    if (rc != 0)
        return rc;
    if (!reply_is_int(r)) {
        hg_reply_free(r);
        return cli_unexpected(name, NULL);
    }
    moved = hg_reply_integer(r);
    hg_reply_free(r);
    if (cli->json)
        printf("{\"%s\":%lld}\n", done, moved);
    else if (n == 2 && moved > 0)
        printf("%s %s\n", done, pos[1]);
    else if (n != 2)
        printf("%s %lld message%s\n", done, moved, moved == 1 ? "" : "s");
    if (n == 2 && moved == 0)
        return cli_fail(EXIT_BROKER, "no message %s in the DLQ of group %s", pos[1], pos[0]);
    return 0;
}

int cli_cmd_dlq_requeue(cli_t *cli, int argc, char **argv)
{
    return dlq_move(cli, "dlq requeue", "REQUEUE", "requeued", argc, argv);
}

int cli_cmd_dlq_drop(cli_t *cli, int argc, char **argv)
{
    return dlq_move(cli, "dlq drop", "DROP", "dropped", argc, argv);
}
