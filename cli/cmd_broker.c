/*
 * cli/cmd_broker.c — hourglass-cli's commands about the broker as a whole:
 * ping, levels, topics, groups, info, send, backup (contract: cli.h). Each parses its own
 * arguments (cli/args.h), runs one broker command through the public API,
 * and prints a table or, with --json, one JSON value (cli/output.h).
 * Single-threaded.
 */
#include "cli/cli.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/units.h"
#include "cli/args.h"
#include "cli/output.h"

int cli_cmd_ping(cli_t *cli, int argc, char **argv)
{
    const char *cmdv[1] = { "PING" };
    char *pos[1];
    hg_reply_t *r;
    int rc = 0, n = cli_parse_args(cli_find_command("ping"), argc, argv, NULL, pos, 0, &rc);

    if (n < 0)
        return rc;
    if ((rc = cli_run(cli, &r, 1, cmdv)) != 0)
        return rc;
    if (cli->json)
        printf("{\"pong\":true,\"address\":\"%s\"}\n", hg_client_address(cli->client));
    else
        printf("PONG from %s\n", hg_client_address(cli->client));
    hg_reply_free(r);
    return 0;
}

int cli_cmd_levels(cli_t *cli, int argc, char **argv)
{
    static const char *const header[4] = { "LEVEL", "DELAY", "DEPTH", "NEXT DUE" };
    static const int right[4] = { 1, 1, 1, 0 };
    const char *cmdv[1] = { "LEVELS" };
    char *pos[1], buf[64];
    hg_reply_t *r;
    table_t t;
    int rc = 0, n = cli_parse_args(cli_find_command("levels"), argc, argv, NULL, pos, 0, &rc);

    if (n < 0)
        return rc;
    if ((rc = cli_run(cli, &r, 1, cmdv)) != 0)
        return rc;
    if (hg_reply_type(r) != HG_REPLY_ARRAY) {
        hg_reply_free(r);
        return cli_unexpected("LEVELS", NULL);
    }
    for (size_t i = 0; i < hg_reply_count(r); i++) {
        const hg_reply_t *row = hg_reply_element(r, i);
        if (hg_reply_count(row) < 4)
            continue;
        for (size_t k = 0; k < 4; k++)
            if (!reply_is_int(hg_reply_element(row, k))) {
                hg_reply_free(r);
                return cli_unexpected("LEVELS", NULL);
            }
    }
    if (cli->json) {
        fputc('[', stdout);
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            const hg_reply_t *row = hg_reply_element(r, i);
            if (hg_reply_count(row) < 4)
                continue;
            units_format_duration((uint64_t)hg_reply_integer(hg_reply_element(row, 1)), buf, sizeof(buf));
            printf("%s{\"level\":%lld,\"delay_ms\":%lld,\"delay\":\"%s\",\"depth\":%lld,\"next_due_ms\":%lld}",
                   i > 0 ? "," : "", hg_reply_integer(hg_reply_element(row, 0)),
                   hg_reply_integer(hg_reply_element(row, 1)), buf, hg_reply_integer(hg_reply_element(row, 2)),
                   hg_reply_integer(hg_reply_element(row, 3)));
        }
        fputs("]\n", stdout);
    } else {
        table_init(&t, 4, header, right);
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            const hg_reply_t *row = hg_reply_element(r, i);
            if (hg_reply_count(row) < 4)
                continue;
            table_addf(&t, "%lld", hg_reply_integer(hg_reply_element(row, 0)));
            units_format_duration((uint64_t)hg_reply_integer(hg_reply_element(row, 1)), buf, sizeof(buf));
            table_add(&t, buf);
            table_addf(&t, "%lld", hg_reply_integer(hg_reply_element(row, 2)));
            out_time((uint64_t)hg_reply_integer(hg_reply_element(row, 3)), buf, sizeof(buf));
            table_add(&t, buf);
        }
        table_print(&t, stdout);
        table_free(&t);
    }
    hg_reply_free(r);
    return 0;
}

/* One field of a GROUP LIST or TOPICS entry (a flat list of name/value pairs). */
static const hg_reply_t *pair_value(const hg_reply_t *entry, const char *name)
{
    for (size_t i = 0; i + 1 < hg_reply_count(entry); i += 2) {
        size_t len;
        const char *k = hg_reply_str(hg_reply_element(entry, i), &len);
        if (k != NULL && len == strlen(name) && memcmp(k, name, len) == 0)
            return hg_reply_element(entry, i + 1);
    }
    return NULL;
}

/* A map reply (a flat list of name/value pairs) as a JSON object; a value
 * that is a list of such maps (TOPICS' groups) as an array of objects. */
static void print_pairs_object(const hg_reply_t *entry)
{
    fputc('{', stdout);
    for (size_t k = 0; k + 1 < hg_reply_count(entry); k += 2) {
        size_t len;
        const char *key = hg_reply_str(hg_reply_element(entry, k), &len);
        const hg_reply_t *v = hg_reply_element(entry, k + 1);
        if (k > 0)
            fputc(',', stdout);
        out_json_string(stdout, key != NULL ? key : "", key != NULL ? len : 0);
        fputc(':', stdout);
        if (reply_is_aggregate(v) && (hg_reply_count(v) == 0 || reply_is_aggregate(hg_reply_element(v, 0)))) {
            fputc('[', stdout);
            for (size_t i = 0; i < hg_reply_count(v); i++) {
                if (i > 0)
                    fputc(',', stdout);
                print_pairs_object(hg_reply_element(v, i));
            }
            fputc(']', stdout);
        } else {
            out_json_reply(stdout, v);
        }
    }
    fputc('}', stdout);
}

/* A list of maps (GROUP LIST, TOPICS) as a JSON array of objects. */
static void print_pairs_array(const hg_reply_t *r)
{
    fputc('[', stdout);
    for (size_t i = 0; i < hg_reply_count(r); i++) {
        if (i > 0)
            fputc(',', stdout);
        print_pairs_object(hg_reply_element(r, i));
    }
    fputs("]\n", stdout);
}

/* --count of a paged listing (TOPICS, GROUP LIST): a positive number, checked
 * here so that a typo is a usage error (exit 2) like every other bad
 * argument, not the broker's refusal. 0, or the usage error's exit code. */
static int page_check(const char *name, const cli_opt_t *specs)
{
    uint64_t v;
    if (specs[0].value != NULL && (cli_parse_u64(specs[0].value, &v) < 0 || v == 0))
        return cli_usage_error("%s: --count '%s' is not a positive number", name, specs[0].value);
    return 0;
}

/* argv for a paged listing: base (nbase words) then COUNT and AFTER from
 * --count / --after when given (TOPICS, GROUP LIST). Returns the word count. */
static int page_args(const char **cmdv, int nbase, const cli_opt_t *specs)
{
    int n = nbase;
    if (specs[0].value != NULL) {
        cmdv[n++] = "COUNT";
        cmdv[n++] = specs[0].value;
    }
    if (specs[1].value != NULL) {
        cmdv[n++] = "AFTER";
        cmdv[n++] = specs[1].value;
    }
    return n;
}

int cli_cmd_topics(cli_t *cli, int argc, char **argv)
{
    static const char *const fields[] = { "topic", "ready", "delayed", "retained", "sends", "dedup" };
    static const char *const header[] = { "TOPIC", "READY", "DELAYED", "RETAINED", "SENDS", "DEDUP", "GROUPS" };
    static const int right[] = { 0, 1, 1, 1, 1, 0, 0 };
    const int nf = (int)(sizeof(fields) / sizeof(fields[0]));
    const char *cmdv[5] = { "TOPICS" };
    cli_opt_t specs[] = { { "--count", 1, NULL }, { "--after", 1, NULL }, { NULL, 0, NULL } };
    char *pos[1];
    hg_reply_t *r;
    table_t t;
    int rc = 0, n = cli_parse_args(cli_find_command("topics"), argc, argv, specs, pos, 0, &rc);

    if (n < 0)
        return rc;
    if ((rc = page_check("topics", specs)) != 0)
        return rc;
    if ((rc = cli_run(cli, &r, page_args(cmdv, 1, specs), cmdv)) != 0)
        return rc;
    if (!reply_is_aggregate(r)) {
        hg_reply_free(r);
        return cli_unexpected("TOPICS", NULL);
    }
    if (cli->json) {
        print_pairs_array(r);
        hg_reply_free(r);
        return 0;
    }
    table_init(&t, nf + 1, header, right);
    for (size_t i = 0; i < hg_reply_count(r); i++) {
        const hg_reply_t *entry = hg_reply_element(r, i);
        for (int k = 0; k < nf; k++) {
            const hg_reply_t *v = pair_value(entry, fields[k]);
            size_t len;
            const char *str = v != NULL ? hg_reply_str(v, &len) : NULL;
            if (v == NULL)
                table_add(&t, "-");
            else if (strcmp(fields[k], "dedup") == 0)
                table_add(&t, reply_is_int(v) && hg_reply_integer(v) ? "yes" : "no");
            else if (reply_is_int(v))
                table_addf(&t, "%lld", hg_reply_integer(v));
            else
                table_add_owned(&t, out_text(str != NULL ? str : "", str != NULL ? len : 0, 0));
        }
        /* GROUPS: the names, comma-separated ("-" for none) */
        const hg_reply_t *groups = pair_value(entry, "groups");
        buf_t names;
        buf_init(&names);
        for (size_t g = 0; groups != NULL && g < hg_reply_count(groups); g++) {
            size_t len;
            const hg_reply_t *name = pair_value(hg_reply_element(groups, g), "group");
            const char *str = name != NULL ? hg_reply_str(name, &len) : NULL;
            if (str != NULL) {
                if (names.len > 0)
                    buf_append(&names, ",", 1);
                buf_append(&names, str, len);
            }
        }
        table_add_owned(&t, out_text(names.len ? names.data : "-", names.len ? names.len : 1, 0));
        buf_free(&names);
    }
    if (hg_reply_count(r) == 0)
        printf("no topics\n");
    else
        table_print(&t, stdout);
    table_free(&t);
    hg_reply_free(r);
    return 0;
}

int cli_cmd_groups(cli_t *cli, int argc, char **argv)
{
    /* Columns in the order of GROUP LIST (docs/broker.md); a field the
     * broker does not send shows as "-". */
    static const char *const fields[] = { "group",         "topic",    "ready", "backlog",       "retry-ready",
                                          "retry-delayed", "inflight", "dlq",   "max-reconsume", "created-ms" };
    static const char *const header[] = { "GROUP",         "TOPIC",    "READY", "BACKLOG",  "RETRY-READY",
                                          "RETRY-DELAYED", "INFLIGHT", "DLQ",   "MAXRETRY", "CREATED" };
    static const int right[] = { 0, 0, 1, 1, 1, 1, 1, 1, 1, 0 };
    const int nf = (int)(sizeof(fields) / sizeof(fields[0]));
    const char *cmdv[6] = { "GROUP", "LIST" };
    cli_opt_t specs[] = { { "--count", 1, NULL }, { "--after", 1, NULL }, { NULL, 0, NULL } };
    char *pos[1], buf[64];
    hg_reply_t *r;
    table_t t;
    int rc = 0, n = cli_parse_args(cli_find_command("groups"), argc, argv, specs, pos, 0, &rc);

    if (n < 0)
        return rc;
    if ((rc = page_check("groups", specs)) != 0)
        return rc;
    if ((rc = cli_run(cli, &r, page_args(cmdv, 2, specs), cmdv)) != 0)
        return rc;
    if (!reply_is_aggregate(r)) {
        hg_reply_free(r);
        return cli_unexpected("GROUP LIST", NULL);
    }
    if (cli->json) {
        print_pairs_array(r);
    } else {
        table_init(&t, nf, header, right);
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            const hg_reply_t *entry = hg_reply_element(r, i);
            for (int k = 0; k < nf; k++) {
                const hg_reply_t *v = pair_value(entry, fields[k]);
                if (v == NULL) {
                    table_add(&t, "-");
                } else if (reply_is_int(v) && strcmp(fields[k], "created-ms") == 0) {
                    out_time((uint64_t)hg_reply_integer(v), buf, sizeof(buf));
                    table_add(&t, buf);
                } else if (reply_is_int(v)) {
                    table_addf(&t, "%lld", hg_reply_integer(v));
                } else {
                    size_t len;
                    const char *s = hg_reply_str(v, &len);
                    table_add_owned(&t, out_text(s != NULL ? s : "", s != NULL ? len : 0, 0));
                }
            }
        }
        if (hg_reply_count(r) == 0)
            printf("no consumer groups\n");
        else
            table_print(&t, stdout);
        table_free(&t);
    }
    hg_reply_free(r);
    return 0;
}

/* Print INFO text ("# Section\r\nkey:value\r\n") as JSON: an object of
 * sections, each an object of fields; integer values become numbers. */
static void info_json(const char *s, size_t n)
{
    int open_section = 0, first_field = 1, first_section = 1;
    size_t i = 0;

    fputc('{', stdout);
    while (i < n) {
        size_t end = i, len;
        while (end < n && s[end] != '\n')
            end++;
        len = end - i;
        if (len > 0 && s[i + len - 1] == '\r')
            len--;
        if (len > 2 && s[i] == '#' && s[i + 1] == ' ') {
            if (open_section)
                fputc('}', stdout);
            if (!first_section)
                fputc(',', stdout);
            first_section = 0;
            out_json_string(stdout, s + i + 2, len - 2);
            fputs(":{", stdout);
            open_section = 1;
            first_field = 1;
        } else if (len > 0 && open_section) {
            const char *colon = memchr(s + i, ':', len);
            if (colon != NULL) {
                size_t klen = (size_t)(colon - (s + i)), vlen = len - klen - 1;
                int numeric = vlen > 0 && vlen < 19;
                for (size_t k = 0; k < vlen && numeric; k++)
                    numeric = isdigit((unsigned char)colon[1 + k]) || (k == 0 && colon[1] == '-' && vlen > 1);
                if (numeric && vlen > 1 && (colon[1] == '0' || (colon[1] == '-' && colon[2] == '0')))
                    numeric = 0; /* leading zeros: keep the text */
                if (!first_field)
                    fputc(',', stdout);
                first_field = 0;
                out_json_string(stdout, s + i, klen);
                fputc(':', stdout);
                if (numeric)
                    fwrite(colon + 1, 1, vlen, stdout);
                else
                    out_json_string(stdout, colon + 1, vlen);
            }
        }
        i = end + 1;
    }
    if (open_section)
        fputc('}', stdout);
    fputs("}\n", stdout);
}

int cli_cmd_info(cli_t *cli, int argc, char **argv)
{
    const char *cmdv[2] = { "INFO", NULL };
    char *pos[1];
    hg_reply_t *r;
    const char *s;
    size_t len;
    int rc = 0, n = cli_parse_args(cli_find_command("info"), argc, argv, NULL, pos, 1, &rc);

    if (n < 0)
        return rc;
    if (n == 1)
        cmdv[1] = pos[0];
    if ((rc = cli_run(cli, &r, n == 1 ? 2 : 1, cmdv)) != 0)
        return rc;
    if (!reply_is_str(r)) {
        hg_reply_free(r);
        return cli_unexpected("INFO", NULL);
    }
    s = hg_reply_str(r, &len);
    if (n == 1 && len == 0) { /* the broker's answer to a section it does not have (as Redis) */
        hg_reply_free(r);
        return cli_usage_error("info: the broker has no INFO section '%s'", pos[0]);
    }
    if (cli->json) {
        info_json(s, len);
    } else {
        for (size_t i = 0; i < len; i++)
            if (s[i] != '\r')
                fputc(s[i], stdout);
        if (len > 0 && s[len - 1] != '\n')
            fputc('\n', stdout);
    }
    hg_reply_free(r);
    return 0;
}

/* --level n against the broker's own table (LEVELS): 0 (now) .. its count.
 * Returns 0, or the exit code with the message printed. */
static int check_level(cli_t *cli, int level)
{
    hg_levels_t *table;
    char first[32], last[32];
    hg_err_t e = hg_levels_fetch(cli->client, &table);

    if (e != HG_OK)
        return cli_client_failure(cli, e);
    int count = hg_levels_count(table);
    if (level > count) {
        units_format_duration(hg_levels_delay_ms(table, 1), first, sizeof first);
        units_format_duration(hg_levels_delay_ms(table, count), last, sizeof last);
        hg_levels_free(table);
        return cli_usage_error("send: --level %d is not a level of this broker (0..%d: 0 = now, 1 = %s … %d = %s)",
                               level, count, first, count, last);
    }
    hg_levels_free(table);
    return 0;
}

int cli_cmd_send(cli_t *cli, int argc, char **argv)
{
    cli_opt_t specs[] = {
        { "--key", 1, NULL }, { "--level", 1, NULL }, { "--delay", 1, NULL }, { "--at", 1, NULL }, { NULL, 0, NULL }
    };
    const command_t *cmd = cli_find_command("send");
    char *pos[2], id[HG_ID_MAX];
    hg_delay_t delay = hg_delay_none();
    uint64_t v;
    hg_err_t e;
    int rc = 0, given = 0, n = cli_parse_args(cmd, argc, argv, specs, pos, 2, &rc);

    if (n < 0)
        return rc;
    if (n < 2)
        return cli_usage_error("send: needs TOPIC and PAYLOAD");
    for (int i = 1; i <= 3; i++)
        given += specs[i].value != NULL;
    if (given > 1)
        return cli_usage_error("send: only one of --level, --delay and --at may be given");
    if (specs[1].value != NULL) {
        if (cli_parse_u64(specs[1].value, &v) < 0 || v > 255)
            return cli_usage_error("send: --level '%s' is not a level number", specs[1].value);
        delay = hg_delay_level((int)v);
    } else if (specs[2].value != NULL) {
        char why[200];
        if (units_parse_duration_str(specs[2].value, UNITS_BARE_MS, &v, why, sizeof why) < 0)
            return cli_usage_error("send: --delay '%s' is not a duration: %s", specs[2].value, why);
        delay = hg_delay_ms(v);
    } else if (specs[3].value != NULL) {
        if (cli_parse_u64(specs[3].value, &v) < 0)
            return cli_usage_error("send: --at '%s' is not a Unix time in milliseconds", specs[3].value);
        delay = hg_delay_at(v);
    }
    if ((rc = cli_connect(cli)) != 0)
        return rc;
    if (specs[1].value != NULL && (rc = check_level(cli, (int)delay.value)) != 0)
        return rc;
    e = hg_send(cli->client, pos[0], specs[0].value, pos[1], strlen(pos[1]), delay, id);
    if (e != HG_OK)
        return cli_client_failure(cli, e);
    if (cli->json)
        printf("{\"id\":\"%s\"}\n", id);
    else
        printf("%s\n", id);
    return 0;
}

/* The value of key in INFO text (hg_info_value), copied to out
 * (NUL-terminated, cut to outlen); 0, or -1 when the key is not there. */
static int info_field(const char *s, size_t n, const char *key, char *out, size_t outlen)
{
    size_t vlen;
    const char *v = hg_info_value(s, n, key, &vlen);
    if (v == NULL)
        return -1;
    snprintf(out, outlen, "%.*s", (int)vlen, v);
    return 0;
}

#define BACKUP_POLL_MS 200

/* Poll INFO storage until the backup called name is no longer running.
 * Prints its outcome; returns 0 (a whole copy), EXIT_BROKER or a client
 * failure's exit code. */
static int backup_wait(cli_t *cli, const char *name)
{
    static const char *const cmdv[2] = { "INFO", "storage" };
    for (;;) {
        hg_reply_t *r;
        int rc = cli_run(cli, &r, 2, cmdv);
        if (rc != 0)
            return rc;
        size_t len;
        const char *s = reply_is_str(r) ? hg_reply_str(r, &len) : NULL;
        char running[8], got[160], status[16], records[24], bytes[24], ms[24], error[400];
        if (s == NULL || info_field(s, len, "backup_in_progress", running, sizeof running) != 0 ||
            info_field(s, len, "backup_name", got, sizeof got) != 0 ||
            info_field(s, len, "backup_last_status", status, sizeof status) != 0 ||
            info_field(s, len, "backup_records", records, sizeof records) != 0 ||
            info_field(s, len, "backup_bytes", bytes, sizeof bytes) != 0 ||
            info_field(s, len, "backup_last_duration_ms", ms, sizeof ms) != 0 ||
            info_field(s, len, "backup_last_error", error, sizeof error) != 0) {
            hg_reply_free(r);
            return cli_unexpected("INFO storage", NULL);
        }
        hg_reply_free(r);
        if (strcmp(running, "0") != 0 || strcmp(got, name) != 0) {
            struct timespec ts = { 0, BACKUP_POLL_MS * 1000000L };
            nanosleep(&ts, NULL);
            continue;
        }
        int ok = strcmp(status, "ok") == 0;
        if (cli->json) {
            printf("{\"backup\":");
            out_json_string(stdout, name, strlen(name));
            printf(",\"status\":");
            out_json_string(stdout, status, strlen(status));
            printf(",\"records\":%s,\"bytes\":%s,\"duration_ms\":%s,\"error\":", records, bytes, ms);
            out_json_string(stdout, error, strlen(error));
            printf("}\n");
        } else if (ok) {
            printf("backup %s: whole, %s records, %s bytes in %s ms\n", name, records, bytes, ms);
        }
        if (!ok)
            return cli_fail(EXIT_BROKER, "backup %s %s%s%s", name, status, error[0] ? ": " : "", error);
        return 0;
    }
}

int cli_cmd_backup(cli_t *cli, int argc, char **argv)
{
    cli_opt_t specs[] = { { "--no-wait", 0, NULL }, { NULL, 0, NULL } };
    char *pos[1];
    hg_reply_t *r;
    int rc = 0, n = cli_parse_args(cli_find_command("backup"), argc, argv, specs, pos, 1, &rc);

    if (n < 0)
        return rc;
    if (n != 1)
        return cli_usage_error("backup: NAME is missing");
    const char *cmdv[2] = { "BACKUP", pos[0] };
    if ((rc = cli_run(cli, &r, 2, cmdv)) != 0)
        return rc;
    size_t len;
    const char *s = hg_reply_type(r) == HG_REPLY_STATUS ? hg_reply_str(r, &len) : NULL;
    if (s == NULL) {
        hg_reply_free(r);
        return cli_unexpected("BACKUP", NULL);
    }
    if (specs[0].value == NULL) {
        hg_reply_free(r);
        return backup_wait(cli, pos[0]);
    }
    if (cli->json) {
        printf("{\"backup\":");
        out_json_string(stdout, pos[0], strlen(pos[0]));
        printf(",\"status\":\"started\"}\n");
    } else {
        printf("%.*s\n", (int)len, s);
    }
    hg_reply_free(r);
    return 0;
}
