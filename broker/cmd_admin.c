/*
 * broker/cmd_admin.c — introspection and operator commands: INFO CONFIG
 * LEVELS SHUTDOWN BACKUP.
 *
 * INFO is assembled from two halves: the storage sections are rendered by a
 * storage job on the storage thread, the loop's sections (server, clients,
 * the loop half of stats) are added around them on the loop thread when the
 * job completes (info_complete). LEVELS is a storage job; CONFIG GET and
 * SHUTDOWN are answered on the loop thread. BACKUP checks its name on the
 * loop and starts the copy from a storage job (broker/backup.h: the snapshot
 * is taken there, after every write before it). Who may run them is the
 * command table's roles column (cmd_table.c); INFO shows file-system paths
 * (storage: dir, backup_last_error) to the admin only, who alone may run
 * CONFIG GET, where every path is (the other roles see INFO_HIDDEN).
 */
#include "broker/cmd_shared.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "broker/metrics.h"
#include "broker/server.h"
#include "levels/store.h"
#include "levels/table.h"

/* INFO's storage job: the sections asked for, and the server for the loop half. */
typedef struct info_job {
    job_t job; /* first member */
    server_t *srv;
    int mask; /* INFO_* bits */
} info_job_t;

static job_result_t levels_exec(job_t *j, writer_t *w)
{
    store_t *s = writer_store(w);
    const lvl_table_t *t = store_levels(s);
    resp_add_array(&j->reply, (size_t)t->count);
    for (int l = 1; l <= t->count; l++) {
        store_level_info_t li;
        store_level_info(s, l, &li);
        resp_add_array(&j->reply, 4);
        resp_add_int(&j->reply, l);
        resp_add_int(&j->reply, (long long)li.delay_ms);
        resp_add_int(&j->reply, (long long)li.depth);
        resp_add_int(&j->reply, (long long)li.head_due_ms);
    }
    return JOB_DONE;
}

void cmd_levels(cmd_call_t *call)
{
    call->job = cmd_job_new(sizeof(job_t), 0, levels_exec, NULL);
}

static job_result_t info_exec(job_t *j, writer_t *w)
{
    const info_job_t *ij = (const info_job_t *)j;
    metrics_info_storage(&j->reply.raw, ij->mask, writer_store(w), writer_stats(w), writer_now(w), 0);
    return JOB_DONE;
}

/* Loop thread: wrap the storage text with the loop's sections into one bulk. */
static void info_complete(job_t *j)
{
    if (j->failed) {
        return;
    }
    const info_job_t *ij = (const info_job_t *)j;
    loop_info_t li;
    server_loop_info(ij->srv, &li);
    buf_t text = BUF_INIT;
    metrics_info_loop_head(&text, ij->mask, &li);
    buf_append(&text, j->reply.raw.data, j->reply.raw.len);
    metrics_info_loop_tail(&text, ij->mask, &li);
    resp_buf_clear(&j->reply);
    resp_add_verbatim(&j->reply, "txt", text.data ? text.data : "", text.len);
    buf_free(&text);
}

typedef struct backup_job {
    job_t job;
    resp_arg_t name, dir;
    uint64_t rate; /* backup-rate */
} backup_job_t;

static job_result_t backup_exec(job_t *j, writer_t *w)
{
    backup_job_t *bj = (backup_job_t *)j;
    char err[400];
    if (backup_start(writer_backup(w), writer_store(w), bj->dir.ptr, bj->name.ptr, writer_disk_floor(w), bj->rate,
                     writer_now(w), err, sizeof err) != 0) {
        cmd_reply_store_error(j, err);
        return JOB_DONE;
    }
    snprintf(err, sizeof err, "Backup started: %s/%s (INFO storage: backup_in_progress)", bj->dir.ptr, bj->name.ptr);
    resp_add_simple(&j->reply, err);
    return JOB_DONE;
}

void cmd_backup(cmd_call_t *call)
{
    const config_t *cfg = cmd_config_of(call);
    if (cfg->backup_dir == NULL || cfg->backup_dir[0] == '\0') {
        resp_add_error(call->out, "ERR BACKUP needs backup-dir in the configuration: the directory the copies go to");
        return;
    }
    char err[200];
    if (backup_check_name(call->argv[1].ptr, call->argv[1].len, err, sizeof err) != 0) {
        char b[40];
        resp_add_errorf(call->out, call->argv[1].len ? "ERR %s, got '%s'" : "ERR %s", err,
                        cmd_shown(&call->argv[1], b, sizeof b));
        return;
    }
    resp_arg_t dir = { .ptr = cfg->backup_dir, .len = strlen(cfg->backup_dir) };
    char *arena;
    backup_job_t *bj =
        cmd_job_new(sizeof *bj, cmd_copy_size(&call->argv[1]) + cmd_copy_size(&dir), backup_exec, &arena);
    bj->name = cmd_job_copy(&arena, &call->argv[1]);
    bj->dir = cmd_job_copy(&arena, &dir);
    bj->rate = (uint64_t)cfg->backup_rate;
    call->job = &bj->job;
}

/* INFO is every user's, but a user without a reading role (a producer only)
 * reads its server section alone: what client libraries ask at connect
 * (ioredis's ready check reads INFO's loading field and warned "Skipping the
 * ready check" for every producer), none of the groups, clients or storage
 * figures the reading roles see. Asked for another section by name, it is
 * refused, naming it; asked for all (no section, all, default, everything),
 * it gets the server section. */
void cmd_info(cmd_call_t *call)
{
    int mask = 0, reads = (call->conn->roles & CMD_ROLES_READ) != 0;
    if (call->argc == 1) {
        mask = INFO_ALL;
    } else {
        for (size_t i = 1; i < call->argc; i++) {
            int one = metrics_info_mask(call->argv[i].ptr, call->argv[i].len);
            if (!reads && one != 0 && one != INFO_SERVER && (one & ~INFO_GROUPS_EVERY) != INFO_ALL) {
                char b[40], roles[64];
                resp_add_errorf(call->out,
                                "NOPERM User %s (roles: %s) may read INFO's server section only, not '%s' "
                                "(a viewer, consumer or admin reads the rest)",
                                conn_user_shown(call->conn), users_roles_text(call->conn->roles, roles, sizeof roles),
                                cmd_shown(&call->argv[i], b, sizeof b));
                return;
            }
            mask |= one;
        }
    }
    if (!reads) {
        mask &= INFO_SERVER;
    }
    if (call->conn->roles & ROLE_ADMIN) { /* file-system paths: the admin's, as with CONFIG GET (metrics.h) */
        mask |= INFO_PATHS;
    }
    if ((mask & ~(INFO_SERVER | INFO_CLIENTS | INFO_PATHS)) == 0) {
        loop_info_t li;
        server_loop_info(call->srv, &li);
        buf_t text = BUF_INIT;
        metrics_info_loop_head(&text, mask, &li);
        resp_add_verbatim(call->out, "txt", text.data ? text.data : "", text.len);
        buf_free(&text);
        return;
    }
    info_job_t *ij = cmd_job_new(sizeof *ij, 0, info_exec, NULL);
    ij->srv = call->srv;
    ij->mask = mask;
    ij->job.complete = info_complete;
    call->job = &ij->job;
}

void cmd_config(cmd_call_t *call)
{
    const resp_arg_t *sub = &call->argv[1];
    resp_buf_t *out = call->out;
    const config_t *cfg = cmd_config_of(call);
    if (cmd_arg_is(sub, "get")) {
        if (call->argc < 3) {
            resp_add_error(out, "ERR wrong number of arguments for 'config|get' command");
            return;
        }
        int n = config_key_count();
        char match[CONFIG_MAX_KEYS];
        size_t hits = 0;
        memset(match, 0, sizeof match);
        for (size_t a = 2; a < call->argc; a++) {
            if (memchr(call->argv[a].ptr, '\0', call->argv[a].len)) {
                continue;
            }
            for (int i = 0; i < n; i++) {
                if (!match[i] && fnmatch(call->argv[a].ptr, config_key_name(i), FNM_CASEFOLD) == 0) {
                    match[i] = 1;
                    hits++;
                }
            }
        }
        /* Two Redis keys that redis-benchmark asks for at start (it warns
         * when they are missing): answered only when named exactly. */
        int want_save = 0, want_aof = 0;
        for (size_t a = 2; a < call->argc; a++) {
            if (cmd_arg_is(&call->argv[a], "save")) {
                want_save = 1;
            }
            if (cmd_arg_is(&call->argv[a], "appendonly")) {
                want_aof = 1;
            }
        }
        resp_add_map(out, hits + (size_t)want_save + (size_t)want_aof);
        for (int i = 0; i < n; i++) {
            if (!match[i]) {
                continue;
            }
            char value[4096];
            config_key_value(cfg, i, value, sizeof value);
            resp_add_bulk_str(out, config_key_name(i));
            resp_add_bulk_str(out, value);
        }
        if (want_save) {
            resp_add_bulk_str(out, "save");
            resp_add_bulk_str(out, "");
        }
        if (want_aof) {
            resp_add_bulk_str(out, "appendonly");
            resp_add_bulk_str(out, cfg->fsync_always ? "yes" : "no");
        }
    } else if (cmd_arg_is(sub, "set") || cmd_arg_is(sub, "rewrite")) {
        resp_add_errorf(out, "ERR CONFIG %s is not supported: change the config file and restart",
                        cmd_arg_is(sub, "set") ? "SET" : "REWRITE");
    } else if (cmd_arg_is(sub, "resetstat")) {
        resp_add_simple(out, "OK");
    } else {
        char b[40];
        resp_add_errorf(out, "ERR unknown subcommand '%s'. Try CONFIG GET.", cmd_shown(sub, b, sizeof b));
    }
}

void cmd_shutdown(cmd_call_t *call)
{
    /* The options change nothing (the store is always saved and closed), but
     * they are checked as Redis 7 checks them: a contradiction or a repeat is
     * an operator's mistake, refused before anything stops. */
    static const char *const names[] = { "NOSAVE", "SAVE", "NOW", "FORCE" };
    int seen[4] = { 0 };
    for (size_t i = 1; i < call->argc; i++) {
        const resp_arg_t *a = &call->argv[i];
        size_t k = 0;
        while (k < 4 && !cmd_arg_is(a, names[k])) {
            k++;
        }
        if (k == 4) {
            cmd_unknown_option(call, a, "shutdown");
            return;
        }
        if (cmd_once(call, &seen[k], names[k]) != 0) {
            return;
        }
    }
    if (seen[0] && seen[1]) {
        resp_add_error(call->out, "ERR syntax error: NOSAVE and SAVE contradict each other");
        return;
    }
    char why[96];
    snprintf(why, sizeof why, "SHUTDOWN from client id=%llu addr=%s", (unsigned long long)call->conn->id,
             call->conn->addr);
    call->no_reply = 1;
    server_shutdown(call->srv, why);
}
