/*
 * cli/cmd_group.c — hourglass-cli's consumer-group and topic changes: group
 * create, group del and topic del (contract: cli.h; the listings are
 * `groups` and `topics`, cli/cmd_broker.c).
 * Each parses its own arguments (cli/args.h), runs one GROUP or TOPIC command through
 * the public API and prints what changed, or one JSON object with --json.
 * Single-threaded.
 */
#include "cli/cli.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli/args.h"
#include "cli/output.h"

int cli_cmd_group_create(cli_t *cli, int argc, char **argv)
{
    cli_opt_t specs[] = { { "--from", 1, NULL }, { "--max-retry", 1, NULL }, { NULL, 0, NULL } };
    const char *cmdv[8] = { "GROUP", "CREATE" };
    char *pos[2], max[24];
    uint64_t v;
    hg_reply_t *r;
    int rc = 0, n = cli_parse_args(cli_find_command("group create"), argc, argv, specs, pos, 2, &rc);

    if (n < 0)
        return rc;
    if (n < 2)
        return cli_usage_error("group create: needs GROUP and TOPIC");
    int nc = 2;
    cmdv[nc++] = pos[0];
    cmdv[nc++] = pos[1];
    if (specs[0].value != NULL) {
        if (strcasecmp(specs[0].value, "first") != 0 && strcasecmp(specs[0].value, "now") != 0)
            return cli_usage_error("group create: --from must be first or now, not '%s'", specs[0].value);
        cmdv[nc++] = "FROM";
        cmdv[nc++] = specs[0].value;
    }
    if (specs[1].value != NULL) {
        if (cli_parse_u64(specs[1].value, &v) < 0 || v > 1000)
            return cli_usage_error("group create: --max-retry '%s' is not a number 0..1000", specs[1].value);
        snprintf(max, sizeof max, "%llu", (unsigned long long)v);
        cmdv[nc++] = "MAXRETRY";
        cmdv[nc++] = max;
    }
    if ((rc = cli_run(cli, &r, nc, cmdv)) != 0)
        return rc; /* the broker's refusal ("group g already exists (bound to topic t)") is printed */
    hg_reply_free(r);
    if (cli->json) {
        fputs("{\"created\":", stdout);
        out_json_string(stdout, pos[0], strlen(pos[0]));
        fputs(",\"topic\":", stdout);
        out_json_string(stdout, pos[1], strlen(pos[1]));
        fputs("}\n", stdout);
    } else {
        printf("created group %s on topic %s\n", pos[0], pos[1]);
    }
    return 0;
}

/* group del / topic del: `VERB DEL name [PURGE]` (verb "GROUP" or "TOPIC")
 * answers 1 (deleted) or 0 (no such one); what names the thing, after the
 * text printed past its name on success. specs: the options (NULL: none);
 * a "--purge" given adds PURGE. */
static int del_named(cli_t *cli, const char *name, const char *verb, const char *what, const char *after,
                     cli_opt_t *specs, int argc, char **argv)
{
    const char *cmdv[4] = { verb, "DEL", NULL, "PURGE" };
    char *pos[1];
    hg_reply_t *r;
    int rc = 0, n = cli_parse_args(cli_find_command(name), argc, argv, specs, pos, 1, &rc);

    if (n < 0)
        return rc;
    if (n < 1)
        return cli_usage_error("%s: needs %s", name, verb);
    cmdv[2] = pos[0];
    int purge = specs != NULL && specs[0].value != NULL;
    if (purge) {
        if ((rc = cli_connect(cli)) != 0)
            return rc;
        hg_client_set_read_timeout(cli->client, hg_topic_purge_read_timeout(hg_client_read_timeout(cli->client)));
    }
    if ((rc = cli_run(cli, &r, purge ? 4 : 3, cmdv)) != 0)
        return rc;
    if (!reply_is_int(r)) {
        hg_reply_free(r);
        return cli_unexpected(name, NULL);
    }
    long long deleted = hg_reply_integer(r);
    hg_reply_free(r);
    if (cli->json)
        printf("{\"deleted\":%lld}\n", deleted);
    else if (deleted)
        printf("deleted %s %s%s\n", what, pos[0], after);
    if (!deleted)
        return cli_fail(EXIT_BROKER, "no %s %s", what, pos[0]);
    return 0;
}

int cli_cmd_group_del(cli_t *cli, int argc, char **argv)
{
    return del_named(cli, "group del", "GROUP", "group", " (its retries, leases and DLQ with it)", NULL, argc, argv);
}

int cli_cmd_topic_del(cli_t *cli, int argc, char **argv)
{
    cli_opt_t specs[] = { { "--purge", 0, NULL }, { NULL, 0, NULL } };
    return del_named(cli, "topic del", "TOPIC", "topic", "", specs, argc, argv);
}
