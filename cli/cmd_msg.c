/*
 * cli/cmd_msg.c — hourglass-cli's message commands: msg show (GET), msg
 * find (FIND), msg revoke (REVOKE) (contract: cli.h), through the library's
 * hg_msg_get / hg_msg_find / hg_msg_revoke_*; --json prints the order view's
 * hg_msg_info_json, the same objects hourglass-console serves.
 * Single-threaded.
 */
#include "cli/cli.h"

#include <hourglass/order_view.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/output.h"

/* TOPIC and KEY of msg find / msg revoke: "TOPIC KEY", the form both take,
 * or "TOPIC --key KEY", the older form msg revoke took (kept: scripts and
 * README use it). npos positionals in pos[], key_opt the --key value or
 * NULL. Returns 0 with *topic and *key, or -1 with the usage error printed
 * and *exit_code set. */
static int topic_and_key(const char *cmd, int npos, char **pos, const char *key_opt, const char **topic,
                         const char **key, int *exit_code)
{
    if (npos == 0) {
        *exit_code = cli_usage_error("%s: needs TOPIC and KEY (hourglass-cli %s TOPIC KEY)", cmd, cmd);
        return -1;
    }
    if (npos == 2 && key_opt != NULL) {
        *exit_code = cli_usage_error("%s: the key given twice ('%s' and --key '%s'): give one, as hourglass-cli %s "
                                     "TOPIC KEY",
                                     cmd, pos[1], key_opt, cmd);
        return -1;
    }
    if (npos == 1 && key_opt == NULL) {
        *exit_code =
            cli_usage_error("%s: needs a KEY after the topic '%s' (hourglass-cli %s %s KEY)", cmd, pos[0], cmd, pos[0]);
        return -1;
    }
    *topic = pos[0];
    *key = key_opt != NULL ? key_opt : pos[1];
    return 0;
}

/* One message for people: a block of "field: value" lines. */
static void print_info(const hg_msg_info_t *m)
{
    char buf[64], *text;

    printf("id:        %s\n", m->id);
    printf("state:     %s\n", hg_msg_state_name(m->state));
    if (m->state == HG_MSG_GONE)
        return;
    text = out_text(m->topic, strlen(m->topic), 0);
    printf("topic:     %s\n", text);
    free(text);
    text = out_text(m->key, m->key_len, 0);
    printf("key:       %s\n", text);
    free(text);
    out_time(m->created_ms, buf, sizeof buf);
    printf("created:   %s\n", buf);
    out_time(m->due_ms, buf, sizeof buf);
    printf("due:       %s\n", buf);
    if (m->state == HG_MSG_DELAYED) {
        out_time(m->hop_due_ms, buf, sizeof buf);
        printf("level:     %d until %s, %d hop%s after it\n", m->level, buf, m->hops_left,
               m->hops_left == 1 ? "" : "s");
    }
    printf("reconsume: %u\n", m->reconsume);
    for (size_t i = 0; i < m->ngroups; i++) {
        const hg_msg_group_t *g = &m->groups[i];
        printf("group:     %s %s", g->group, hg_msg_state_name(g->state));
        if (g->state == HG_MSG_LEASED) {
            out_time(g->deadline_ms, buf, sizeof buf);
            printf(" until %s", buf);
        } else if (g->state == HG_MSG_RETRY && g->level > 0) {
            out_time(g->due_ms, buf, sizeof buf);
            printf(" on level %d, ready at %s", g->level, buf);
        } else if (g->state == HG_MSG_DLQ) {
            out_time(g->parked_ms, buf, sizeof buf);
            text = out_text(g->reason, strlen(g->reason), 0);
            printf(" since %s: %s", buf, text);
            free(text);
        }
        printf(" (%u failures)\n", g->reconsume);
    }
    if (m->payload != NULL) {
        text = out_text(m->payload, m->payload_len, 0);
        printf("payload:   %s\n", text);
        free(text);
    }
}

int cli_cmd_msg_show(cli_t *cli, int argc, char **argv)
{
    char *pos[1];
    uint64_t id;
    hg_msg_info_t *m;
    hg_err_t e;
    int rc = 0, n = cli_parse_args(cli_find_command("msg show"), argc, argv, NULL, pos, 1, &rc);

    if (n < 0)
        return rc;
    if (n < 1)
        return cli_usage_error("msg show: needs a message ID");
    if (cli_parse_id(pos[0], &id) < 0)
        return cli_usage_error("msg show: '%s' is not a message id (16 hex digits)", pos[0]);
    if ((rc = cli_connect(cli)) != 0)
        return rc;
    if ((e = hg_msg_get(cli->client, pos[0], &m)) != HG_OK)
        return cli_client_failure(cli, e);
    if (cli->json) {
        char *js = hg_msg_info_json(m);
        printf("%s\n", js);
        free(js);
    } else {
        print_info(m);
    }
    rc = m->state == HG_MSG_GONE ? cli_fail(EXIT_BROKER, "message %s is gone: the broker holds no copy", pos[0]) : 0;
    hg_msg_info_free(m);
    return rc;
}

int cli_cmd_msg_find(cli_t *cli, int argc, char **argv)
{
    static const char *const header[] = { "ID", "STATE", "DUE", "RECONSUME", "GROUPS" };
    static const int right[] = { 0, 0, 0, 1, 0 };
    cli_opt_t specs[] = { { "--key", 1, NULL }, { NULL, 0, NULL } };
    char *pos[2], buf[64];
    const char *topic, *key;
    hg_msg_info_t *ms;
    size_t count;
    hg_err_t e;
    int rc = 0, n = cli_parse_args(cli_find_command("msg find"), argc, argv, specs, pos, 2, &rc);

    if (n < 0)
        return rc;
    if (topic_and_key("msg find", n, pos, specs[0].value, &topic, &key, &rc) < 0)
        return rc;
    if ((rc = cli_connect(cli)) != 0)
        return rc;
    if ((e = hg_msg_find(cli->client, topic, key, &ms, &count)) != HG_OK)
        return cli_client_failure(cli, e);
    if (cli->json) {
        printf("[");
        for (size_t i = 0; i < count; i++) {
            char *js = hg_msg_info_json(&ms[i]);
            printf("%s%s", i > 0 ? "," : "", js);
            free(js);
        }
        printf("]\n");
    } else if (count == 0) {
        printf("no message of topic %s with key %s in the broker\n", topic, key);
    } else {
        table_t t;
        table_init(&t, 5, header, right);
        for (size_t i = 0; i < count; i++) {
            char groups[512] = "";
            size_t len = 0;
            table_add(&t, ms[i].id);
            table_add(&t, hg_msg_state_name(ms[i].state));
            out_time(ms[i].due_ms, buf, sizeof buf);
            table_add(&t, buf);
            table_addf(&t, "%u", ms[i].reconsume);
            for (size_t g = 0; g < ms[i].ngroups && len < sizeof groups - 1; g++)
                len += (size_t)snprintf(groups + len, sizeof groups - len, "%s%s:%s", g > 0 ? " " : "",
                                        ms[i].groups[g].group, hg_msg_state_name(ms[i].groups[g].state));
            table_add_owned(&t, out_text(groups, strlen(groups), 0));
        }
        table_print(&t, stdout);
        table_free(&t);
    }
    hg_msg_infos_free(ms, count);
    return 0;
}

int cli_cmd_msg_revoke(cli_t *cli, int argc, char **argv)
{
    cli_opt_t specs[] = { { "--key", 1, NULL }, { NULL, 0, NULL } };
    char *pos[2];
    const char *topic, *key;
    uint64_t id;
    hg_revoke_result_t res;
    hg_err_t e;
    int rc = 0, n = cli_parse_args(cli_find_command("msg revoke"), argc, argv, specs, pos, 2, &rc);

    if (n < 0)
        return rc;
    if (n == 0 && specs[0].value == NULL)
        return cli_usage_error("msg revoke: needs a message ID or TOPIC KEY (hourglass-cli msg revoke ID, or "
                               "hourglass-cli msg revoke TOPIC KEY)");
    if (n == 1 && specs[0].value == NULL) {
        if (cli_parse_id(pos[0], &id) < 0)
            return cli_usage_error("msg revoke: '%s' is not a message id (16 hex digits); to revoke a topic's "
                                   "messages by key give the KEY too: hourglass-cli msg revoke %s KEY",
                                   pos[0], pos[0]);
        topic = NULL;
        key = NULL;
    } else if (topic_and_key("msg revoke", n, pos, specs[0].value, &topic, &key, &rc) < 0) {
        return rc;
    }
    if ((rc = cli_connect(cli)) != 0)
        return rc;
    memset(&res, 0, sizeof res);
    e = topic != NULL ? hg_msg_revoke_key(cli->client, topic, key, &res) : hg_msg_revoke_id(cli->client, pos[0], &res);
    if (e != HG_OK)
        return cli_client_failure(cli, e);
    if (cli->json) {
        printf("{\"revoked\":%" PRIu64 ",\"delayed\":%" PRIu64 ",\"ready\":%" PRIu64 ",\"refused\":[", res.revoked,
               res.from_delayed, res.from_ready);
        for (size_t i = 0; i < res.nrefused && i < 16; i++) {
            printf("%s{\"id\":\"%s\",\"reason\":", i > 0 ? "," : "", res.refused[i].id);
            out_json_string(stdout, res.refused[i].reason, strlen(res.refused[i].reason));
            printf("}");
        }
        printf("]}\n");
    } else {
        printf("revoked %" PRIu64 " message%s (%" PRIu64 " delayed, %" PRIu64 " ready)\n", res.revoked,
               res.revoked == 1 ? "" : "s", res.from_delayed, res.from_ready);
        for (size_t i = 0; i < res.nrefused && i < 16; i++)
            printf("refused %s: %s\n", res.refused[i].id, res.refused[i].reason);
    }
    return res.revoked == 0 && res.nrefused > 0 ? EXIT_BROKER : 0;
}
