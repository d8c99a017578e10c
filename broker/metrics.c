/*
 * broker/metrics.c — histograms, INFO text and Prometheus text (see metrics.h).
 *
 * The storage-side renderers run on the storage thread inside INFO and
 * /metrics jobs (so they read the store directly, exactly, without locks);
 * the loop-side renderers run on the loop thread with a loop_info_t. The
 * HTTP listener itself lives in server_http.c; this file only renders text.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "broker/metrics.h"
#include "broker/syncer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/alloc.h"
#include "levels/msg.h"

static const double lateness_bounds[] = { 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                          0.5,   1,     2,     5,    10,    30,   60,  300 };
static const double batch_bounds[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192 };
static const double commit_bounds[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                        0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5 };

#define NB(a) ((int)(sizeof a / sizeof a[0]))

void storage_stats_init(storage_stats_t *s, uint64_t now_ms)
{
    memset(s, 0, sizeof *s);
    s->started_ms = now_ms;
    prom_hist_init(&s->lateness, lateness_bounds, NB(lateness_bounds));
    prom_hist_init(&s->batch_jobs, batch_bounds, NB(batch_bounds));
    prom_hist_init(&s->commit_seconds, commit_bounds, NB(commit_bounds));
}

int metrics_info_mask(const char *name, size_t len)
{
    static const struct {
        const char *name;
        int mask;
    } sections[] = {
        { "server", INFO_SERVER },
        { "clients", INFO_CLIENTS },
        { "levels", INFO_LEVELS },
        { "groups", INFO_GROUPS | INFO_GROUPS_EVERY },
        { "storage", INFO_STORAGE },
        { "stats", INFO_STATS },
        { "all", INFO_ALL | INFO_GROUPS_EVERY },
        { "default", INFO_ALL },
        { "everything", INFO_ALL | INFO_GROUPS_EVERY },
        { "memory", INFO_MEMORY },
    };
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        if (strlen(sections[i].name) == len && strncasecmp(sections[i].name, name, len) == 0) {
            return sections[i].mask;
        }
    }
    return 0;
}

/* ---- INFO ----------------------------------------------------------------------- */

typedef struct group_acc {
    uint64_t n, ready, inflight, retry, dlq;
} group_acc_t;

static void info_group_line(buf_t *out, const char *group, const store_group_info_t *gi)
{
    buf_printf(out,
               "group_%s:topic=%s,ready=%llu,backlog=%llu,retry_ready=%llu,retry_delayed=%llu,"
               "inflight=%llu,dlq=%llu,max_reconsume=%u\r\n",
               group, gi->topic, (unsigned long long)gi->ready, (unsigned long long)gi->backlog,
               (unsigned long long)gi->retry_ready, (unsigned long long)gi->retry_delayed,
               (unsigned long long)gi->inflight, (unsigned long long)gi->dlq, gi->max_reconsume);
}

static int info_group(void *ctx, const char *group, const store_group_info_t *gi)
{
    group_acc_t *a = ctx;
    a->n++;
    a->ready += gi->ready;
    a->inflight += gi->inflight;
    a->retry += gi->retry_ready + gi->retry_delayed;
    a->dlq += gi->dlq;
    (void)group;
    return 0;
}

static void section(buf_t *out, const char *name)
{
    if (out->len > 0) {
        buf_append(out, "\r\n", 2);
    }
    buf_printf(out, "# %s\r\n", name);
}

void metrics_info_storage(buf_t *out, int mask, store_t *s, const storage_stats_t *st, uint64_t now_ms, size_t parked)
{
    (void)parked;
    /* A separator is needed when the loop's sections come first. */
    int lead = (mask & (INFO_SERVER | INFO_CLIENTS)) != 0;
    buf_t *o = out;
    const lvl_table_t *t = store_levels(s);
    if (mask & INFO_LEVELS) {
        if (lead || o->len) {
            buf_append(o, "\r\n", 2);
        }
        buf_printf(o, "# Levels\r\n");
        uint64_t total = 0;
        int damaged = 0; /* levels whose due move fails at their head (skipped, tried again every 60 s) */
        for (int l = 1; l <= t->count; l++) {
            store_level_info_t li;
            store_level_info(s, l, &li);
            total += li.depth;
            damaged += li.damaged != 0;
            char d[32];
            units_format_duration(li.delay_ms, d, sizeof d);
            long long lag = li.head_due_ms && now_ms > li.head_due_ms ? (long long)(now_ms - li.head_due_ms) : 0;
            buf_printf(o, "level%d:delay=%s,delay_ms=%llu,depth=%llu,next_due_ms=%llu,head_lag_ms=%lld\r\n", l, d,
                       (unsigned long long)li.delay_ms, (unsigned long long)li.depth,
                       (unsigned long long)li.head_due_ms, lag);
        }
        buf_printf(o, "levels:%d\r\ndelayed_messages:%llu\r\nlevels_damaged:%d\r\n", t->count,
                   (unsigned long long)total, damaged);
    }
    if (mask & INFO_GROUPS) {
        if (lead || o->len) {
            buf_append(o, "\r\n", 2);
        }
        buf_printf(o, "# Groups\r\n");
        /* Every group's line only when asked for them (INFO groups, all,
         * everything); else the first INFO_GROUPS_LISTED by name. */
        store_group_row_t *rows;
        size_t nrows;
        store_group_page(s, NULL, (mask & INFO_GROUPS_EVERY) ? 0 : INFO_GROUPS_LISTED, &rows, &nrows);
        for (size_t i = 0; i < nrows; i++) {
            info_group_line(o, rows[i].name, &rows[i].info);
        }
        free(rows);
        group_acc_t a = { 0 };
        store_group_foreach(s, info_group, &a);
        uint64_t deleting, deleting_entries;
        store_groups_deleting(s, &deleting, &deleting_entries);
        buf_printf(o,
                   "groups:%llu\r\nready:%llu\r\ninflight:%llu\r\ninflight_unwritten:%llu\r\nretry:%llu\r\n"
                   "dlq:%llu\r\ngroups_deleting:%llu\r\ngroups_deleting_entries:%llu\r\ngroups_unlisted:%llu\r\n"
                   "group_queues_damaged:%llu\r\n",
                   (unsigned long long)a.n, (unsigned long long)a.ready, (unsigned long long)a.inflight,
                   (unsigned long long)store_leases_unwritten(s), (unsigned long long)a.retry,
                   (unsigned long long)a.dlq, (unsigned long long)deleting, (unsigned long long)deleting_entries,
                   (unsigned long long)(a.n - nrows), (unsigned long long)store_group_queues_damaged(s));
    }
    if (mask & INFO_STORAGE) {
        if (lead || o->len) {
            buf_append(o, "\r\n", 2);
        }
        const store_options_t *so = store_options(s);
        char spec[512];
        lvl_table_format(t, spec, sizeof spec);
        buf_printf(o,
                   "# Storage\r\ndir:%s\r\nfsync:%s\r\nlevel_table:%s\r\nformat_version:%d\r\n"
                   "pending_writes:%d\r\nbroken:%d\r\ngroup_commits:%llu\r\ncommits:%llu\r\n"
                   "commit_failures:%llu\r\nreopens:%llu\r\njobs:%llu\r\nmax_batch:%llu\r\n"
                   "avg_batch:%.2f\r\nlast_commit_us:%llu\r\ncommit_p99_ms:%.3f\r\nmaintenance_work:%llu\r\n"
                   "memory_trims:%llu\r\nlog_spare_segments:%llu\r\n",
                   (mask & INFO_PATHS) ? so->path : INFO_HIDDEN, so->sync ? "always" : "no", spec, STORE_FORMAT_VERSION,
                   store_pending(s), store_broken(s), (unsigned long long)st->batches, (unsigned long long)st->commits,
                   (unsigned long long)st->commit_failures, (unsigned long long)st->reopens,
                   (unsigned long long)st->jobs, (unsigned long long)st->max_batch,
                   st->batches ? (double)st->jobs / (double)st->batches : 0.0, (unsigned long long)st->last_commit_us,
                   prom_hist_quantile(&st->commit_seconds, 0.99) * 1000.0, (unsigned long long)st->maintain_work,
                   (unsigned long long)st->memory_trims, (unsigned long long)store_log_spare_segments(s));
        if (st->syncer != NULL) {
            prom_hist_t fs;
            uint64_t last_us;
            syncer_fsync_stats(st->syncer, &fs, &last_us);
            buf_printf(o, "fsyncs:%llu\r\nlast_fsync_us:%llu\r\nfsync_p99_ms:%.3f\r\n", (unsigned long long)fs.count,
                       (unsigned long long)last_us, prom_hist_quantile(&fs, 0.99) * 1000.0);
        }
        buf_printf(o, "disk_full:%d\r\ndisk_free_bytes:%llu\r\ndisk_full_events:%llu\r\ndisk_full_refusals:%llu\r\n",
                   st->disk_full, (unsigned long long)st->disk_free_bytes, (unsigned long long)st->disk_full_events,
                   (unsigned long long)st->disk_full_refusals);
        if (st->backup != NULL) {
            backup_status_t b;
            backup_status(st->backup, &b);
            buf_printf(o,
                       "backup_in_progress:%d\r\nbackup_name:%s\r\nbackup_started_ms:%llu\r\nbackup_records:%llu\r\n"
                       "backup_bytes:%llu\r\nbackup_last_status:%s\r\nbackup_last_duration_ms:%llu\r\n"
                       "backup_last_ok_ms:%llu\r\nbackup_last_error:%s\r\n",
                       b.running, b.name, (unsigned long long)b.started_ms, (unsigned long long)b.keys,
                       (unsigned long long)b.bytes, backup_result_name(b.last), (unsigned long long)b.last_ms,
                       (unsigned long long)b.last_ok_ms,
                       (mask & INFO_PATHS) || b.last_error[0] == '\0' ? b.last_error : INFO_HIDDEN);
        }
    }
    if (mask & INFO_STATS) {
        if (lead || o->len) {
            buf_append(o, "\r\n", 2);
        }
        buf_printf(o,
                   "# Stats\r\nsends:%llu\r\ndeliveries:%llu\r\nacks:%llu\r\nnacks:%llu\r\ntouches:%llu\r\n"
                   "lease_expiries:%llu\r\nretries:%llu\r\ndlq_moves:%llu\r\ndlq_requeued:%llu\r\n"
                   "dlq_dropped:%llu\r\nlevel_moves:%llu\r\nmade_ready:%llu\r\n"
                   "lateness_p50_ms:%.0f\r\nlateness_p99_ms:%.0f\r\nlateness_avg_ms:%.3f\r\n",
                   (unsigned long long)st->sends, (unsigned long long)st->deliveries, (unsigned long long)st->acks,
                   (unsigned long long)st->nacks, (unsigned long long)st->touches,
                   (unsigned long long)st->lease_expiries, (unsigned long long)st->retries,
                   (unsigned long long)st->dlq_moves, (unsigned long long)st->requeued, (unsigned long long)st->dropped,
                   (unsigned long long)st->moved, (unsigned long long)st->made_ready,
                   prom_hist_quantile(&st->lateness, 0.5) * 1000.0, prom_hist_quantile(&st->lateness, 0.99) * 1000.0,
                   st->lateness.count ? st->lateness.sum * 1000.0 / (double)st->lateness.count : 0.0);
        buf_printf(o, "dedup_hits:%llu\r\nrevoked:%llu\r\nwake_deferrals:%llu\r\nclosed_jobs_dropped:%llu\r\n",
                   (unsigned long long)st->dedup_hits, (unsigned long long)st->revoked,
                   (unsigned long long)st->wake_deferrals, (unsigned long long)st->closed_jobs_dropped);
    }
}

void metrics_info_loop_head(buf_t *out, int mask, const loop_info_t *li)
{
    if (mask & INFO_SERVER) {
        section(out, "Server");
        buf_printf(out,
                   "hourglass_version:%s\r\nredis_version:7.0.0\r\nprocess_id:%ld\r\ntcp_port:%d\r\ntls_port:%d\r\n"
                   "uptime_in_seconds:%llu\r\nbind:%s\r\nmetrics_port:%lld\r\n",
                   PACKAGE_VERSION, (long)getpid(), li->port, li->tls_port, (unsigned long long)(li->uptime_ms / 1000),
                   li->cfg->bind, li->cfg->metrics_port);
        buf_printf(out, "protected_mode:%s\r\nauth_required:%s\r\nusers:%llu\r\nsecurity_warning:%s\r\n",
                   li->protected_mode ? "yes" : "no", li->auth_required ? "yes" : "no", (unsigned long long)li->users,
                   li->security_warning ? li->security_warning : "none");
    }
    if (mask & INFO_CLIENTS) {
        section(out, "Clients");
        buf_printf(out,
                   "connected_clients:%llu\r\nconnected_tls_clients:%llu\r\ntls_handshakes_in_progress:%llu\r\n"
                   "blocked_clients:%llu\r\nmaxclients:%lld\r\n"
                   "storage_jobs_queued:%llu\r\nstorage_jobs_parked:%llu\r\n"
                   "client_memory:%llu\r\nmax_client_memory:%lld\r\n",
                   (unsigned long long)li->connected_clients, (unsigned long long)li->connected_tls_clients,
                   (unsigned long long)li->tls_handshakes_in_progress, (unsigned long long)li->blocked_clients,
                   li->cfg->max_clients, (unsigned long long)li->jobs_queued, (unsigned long long)li->jobs_parked,
                   (unsigned long long)li->client_memory, li->cfg->max_client_memory);
    }
    if (mask & INFO_MEMORY) {
        /* The process's resident bytes (Redis reports its allocator's; ours is
         * LevelDB's cache and memtable plus the connections' buffers). */
        uint64_t rss, peak;
        prom_process_memory(&rss, &peak);
        section(out, "Memory");
        buf_printf(out,
                   "used_memory:%llu\r\nused_memory_human:%.2fM\r\nused_memory_rss:%llu\r\n"
                   "used_memory_peak:%llu\r\nused_memory_peak_human:%.2fM\r\nmaxmemory:0\r\n",
                   (unsigned long long)rss, (double)rss / 1048576.0, (unsigned long long)rss, (unsigned long long)peak,
                   (double)peak / 1048576.0);
    }
}

void metrics_info_loop_tail(buf_t *out, int mask, const loop_info_t *li)
{
    if (mask & INFO_STATS) {
        buf_printf(out,
                   "total_connections_received:%llu\r\nrejected_connections:%llu\r\n"
                   "total_commands_processed:%llu\r\nprotocol_errors:%llu\r\nreply_buffer_disconnects:%llu\r\n"
                   "idle_disconnects:%llu\r\nclient_memory_disconnects:%llu\r\nheader_timeout_disconnects:%llu\r\n",
                   (unsigned long long)li->connections_total, (unsigned long long)li->rejected_connections,
                   (unsigned long long)li->commands_processed, (unsigned long long)li->protocol_errors,
                   (unsigned long long)li->reply_buffer_kills, (unsigned long long)li->idle_kills,
                   (unsigned long long)li->memory_kills, (unsigned long long)li->header_timeout_kills);
        buf_printf(out, "auth_failures:%llu\r\ndenied_connections:%llu\r\ntls_handshakes_refused:%llu\r\n",
                   (unsigned long long)li->auth_failures, (unsigned long long)li->denied_connections,
                   (unsigned long long)li->tls_handshakes_refused);
    }
}

/* ---- Prometheus ------------------------------------------------------------------- */

/* The per-topic and per-group series: for the first max_topics topics in
 * name order (a stable set from one scrape to the next) each topic's series
 * and its groups' (a group is labelled with its topic); the topics left out
 * are counted in hourglass_metrics_topics_omitted. Any SEND names a new
 * topic (only an empty one can be deleted), so without the bound a client could make
 * the page (and the time series database) grow without end. */
static void prom_topics(buf_t *o, store_t *s, long long max_topics)
{
    /* The shown topics picked and their groups read from each (store_topic_page,
     * store_topic_group_rows), not every topic and group copied and sorted:
     * at 10 000 of each a scrape with the default 100 sorted 20 000 rows. */
    store_topic_row_t *topics = NULL;
    store_group_row_t *groups = NULL;
    size_t ntopics = store_topic_count(s), shown = 0, ngroups = 0, cap = 0;
    if (max_topics != 0) {
        store_topic_page(s, NULL, max_topics > 0 ? (size_t)max_topics : 0, &topics, &shown);
    }
    for (size_t i = 0; i < shown; i++) {
        store_group_row_t *rows;
        size_t n;
        store_topic_group_rows(s, topics[i].name, strlen(topics[i].name), &rows, &n);
        if (ngroups + n > cap) {
            cap = (ngroups + n) * 2;
            groups = xrealloc(groups, cap * sizeof *groups);
        }
        if (n > 0) {
            memcpy(groups + ngroups, rows, n * sizeof *rows);
        }
        ngroups += n;
        free(rows);
    }
    static const struct {
        const char *name, *type, *help;
    } tm[] = {
        { "hourglass_topic_ready", "gauge", "Messages in a topic's log that some group of it has not taken yet." },
        { "hourglass_topic_delayed", "gauge", "A topic's messages still on their SEND journey in the level queues." },
        { "hourglass_topic_retained", "gauge", "Entries in a topic's log (consumed ones stay until it is collected)." },
        { "hourglass_topic_sends_total", "counter", "SENDs accepted for a topic since the broker started." },
    };
    for (size_t m = 0; m < sizeof tm / sizeof tm[0]; m++) {
        buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", tm[m].name, tm[m].help, tm[m].name, tm[m].type);
        for (size_t i = 0; i < shown; i++) {
            const store_topic_info_t *ti = &topics[i].info;
            uint64_t v = m == 0 ? ti->ready : m == 1 ? ti->delayed : m == 2 ? ti->retained : ti->sent;
            char tl[2 * MSG_MAX_NAME + 2];
            prom_label_escape(topics[i].name, tl, sizeof tl);
            buf_printf(o, "%s{topic=\"%s\"} %llu\n", tm[m].name, tl, (unsigned long long)v);
        }
    }
    static const struct {
        const char *name, *help;
    } gm[] = {
        { "hourglass_group_ready", "Messages a group can PULL now." },
        { "hourglass_group_inflight", "Messages leased to a group." },
        { "hourglass_group_retry", "Retries of a group waiting or ready." },
        { "hourglass_group_dlq", "Messages in a group's DLQ." },
    };
    for (size_t m = 0; m < sizeof gm / sizeof gm[0]; m++) {
        buf_printf(o, "# HELP %s %s\n# TYPE %s gauge\n", gm[m].name, gm[m].help, gm[m].name);
        for (size_t i = 0; i < ngroups; i++) {
            const store_group_info_t *gi = &groups[i].info;
            uint64_t v = m == 0   ? gi->ready
                         : m == 1 ? gi->inflight
                         : m == 2 ? gi->retry_ready + gi->retry_delayed
                                  : gi->dlq;
            char gl[2 * MSG_MAX_NAME + 2], tl[2 * MSG_MAX_NAME + 2];
            prom_label_escape(groups[i].name, gl, sizeof gl);
            prom_label_escape(gi->topic, tl, sizeof tl);
            buf_printf(o, "%s{group=\"%s\",topic=\"%s\"} %llu\n", gm[m].name, gl, tl, (unsigned long long)v);
        }
    }
    prom_metric_u64(o, "hourglass_metrics_topics_omitted", "gauge",
                    "Topics (with their groups) left out of the per-topic series by metrics-max-topics.",
                    (uint64_t)(ntopics - shown));
    free(topics);
    free(groups);
}

void metrics_prom_storage(buf_t *o, store_t *s, const storage_stats_t *st, uint64_t now_ms, long long max_topics)
{
    const lvl_table_t *t = store_levels(s);
    buf_printf(o, "# HELP hourglass_level_depth Messages waiting on a delay level.\n"
                  "# TYPE hourglass_level_depth gauge\n");
    for (int l = 1; l <= t->count; l++) {
        store_level_info_t li;
        store_level_info(s, l, &li);
        char d[32];
        units_format_duration(li.delay_ms, d, sizeof d);
        buf_printf(o, "hourglass_level_depth{level=\"%d\",delay=\"%s\"} %llu\n", l, d, (unsigned long long)li.depth);
    }
    buf_printf(o, "# HELP hourglass_level_head_lag_seconds How far past due the head of a level is (0 when not due).\n"
                  "# TYPE hourglass_level_head_lag_seconds gauge\n");
    for (int l = 1; l <= t->count; l++) {
        store_level_info_t li;
        store_level_info(s, l, &li);
        char d[32];
        units_format_duration(li.delay_ms, d, sizeof d);
        double lag = li.head_due_ms && now_ms > li.head_due_ms ? (double)(now_ms - li.head_due_ms) / 1000.0 : 0.0;
        buf_printf(o, "hourglass_level_head_lag_seconds{level=\"%d\",delay=\"%s\"} %.3f\n", l, d, lag);
    }
    char every[32];
    units_format_duration(store_options(s)->damage_retry_ms, every, sizeof every);
    buf_printf(o,
               "# HELP hourglass_level_damaged 1 while a level's due move fails at its head and the level is "
               "skipped (tried again every %s: damage-retry).\n"
               "# TYPE hourglass_level_damaged gauge\n",
               every);
    for (int l = 1; l <= t->count; l++) {
        store_level_info_t li;
        store_level_info(s, l, &li);
        char d[32];
        units_format_duration(li.delay_ms, d, sizeof d);
        buf_printf(o, "hourglass_level_damaged{level=\"%d\",delay=\"%s\"} %d\n", l, d, li.damaged);
    }
    prom_metric_u64(o, "hourglass_level_damage_events_total", "counter",
                    "Levels found damaged at their head by the due move (a failed retry of one is not counted again).",
                    st->level_damage_events);
    prom_metric_u64(o, "hourglass_lane_full_hops_total", "counter",
                    "Due hops put back on their level for another of its delay because the remainder lane was full "
                    "(each message arrives that much late).",
                    st->lane_full_hops);
    prom_metric_u64(o, "hourglass_group_queues_damaged", "gauge",
                    "Group queues (a retry queue, a topic log at a group's cursor) whose PULL fails at their head and "
                    "that the group's PULLs skip (tried again every 60 s).",
                    store_group_queues_damaged(s));
    prom_metric_u64(o, "hourglass_group_damage_events_total", "counter",
                    "Group queues found damaged at their head by a PULL (a failed retry of one is not counted again).",
                    st->group_damage_events);
    prom_topics(o, s, max_topics);
    prom_metric_u64(o, "hourglass_sends_total", "counter", "Messages accepted by SEND.", st->sends);
    prom_metric_u64(o, "hourglass_deliveries_total", "counter", "Messages delivered by PULL.", st->deliveries);
    prom_metric_u64(o, "hourglass_acks_total", "counter", "Leases released by ACK.", st->acks);
    prom_metric_u64(o, "hourglass_nacks_total", "counter", "Leases failed by NACK.", st->nacks);
    prom_metric_u64(o, "hourglass_lease_expiries_total", "counter", "Leases that expired.", st->lease_expiries);
    prom_metric_u64(o, "hourglass_retries_total", "counter", "Failures scheduled for retry.", st->retries);
    prom_metric_u64(o, "hourglass_dlq_moves_total", "counter", "Failures parked in a DLQ.", st->dlq_moves);
    prom_metric_u64(o, "hourglass_dlq_requeued_total", "counter", "DLQ messages requeued.", st->requeued);
    prom_metric_u64(o, "hourglass_dlq_dropped_total", "counter", "DLQ messages dropped.", st->dropped);
    prom_metric_u64(o, "hourglass_level_moves_total", "counter", "Level heads moved (hops included).", st->moved);
    prom_metric_u64(o, "hourglass_dedup_hits_total", "counter",
                    "SEND ... DEDUP answered with a live message's id (nothing stored).", st->dedup_hits);
    prom_metric_u64(o, "hourglass_revoked_total", "counter", "Messages taken back by REVOKE.", st->revoked);
    prom_metric_u64(o, "hourglass_group_commits_total", "counter", "Storage-thread iterations that ran jobs.",
                    st->batches);
    prom_metric_u64(o, "hourglass_commit_failures_total", "counter", "Commits that failed.", st->commit_failures);
    uint64_t rb_spares, rb_bytes, rb_failures;
    store_log_read_back_counts(s, &rb_spares, &rb_bytes, &rb_failures);
    prom_metric_u64(o, "hourglass_log_spares_read_back_total", "counter",
                    "Read-backs of the commit log's next spare segment into the page cache (a recycled one, a new "
                    "one, and any once more in the second half of the segment before it) run through.",
                    rb_spares);
    prom_metric_u64(o, "hourglass_log_spare_read_back_bytes_total", "counter",
                    "Bytes those read-backs read from the segments (1 MiB chunks already cached are skipped).",
                    rb_bytes);
    prom_metric_u64(o, "hourglass_log_spare_read_back_failures_total", "counter",
                    "Those read-backs that failed (the switch's appends fill their pages themselves).", rb_failures);
    prom_metric_u64(o, "hourglass_leases_unwritten", "gauge",
                    "Leases held in memory and not written yet (lease-write-delay); in the in-flight counts.",
                    store_leases_unwritten(s));
    uint64_t deleting, deleting_entries;
    store_groups_deleting(s, &deleting, &deleting_entries);
    prom_metric_u64(o, "hourglass_groups_deleting", "gauge",
                    "Groups GROUP DEL took away whose entries are still being deleted in the background.", deleting);
    prom_metric_u64(o, "hourglass_groups_deleting_entries", "gauge",
                    "Leases, retries and DLQ entries those groups still hold.", deleting_entries);
    prom_metric_u64(o, "hourglass_disk_full", "gauge",
                    "1 while the data directory's disk is full and writes are refused.", (uint64_t)st->disk_full);
    prom_metric_u64(o, "hourglass_disk_free_bytes", "gauge", "Free space of the data directory's file system.",
                    st->disk_free_bytes);
    prom_metric_u64(o, "hourglass_disk_full_refusals_total", "counter",
                    "Write commands refused while the disk was full.", st->disk_full_refusals);
    if (st->backup != NULL) {
        backup_status_t b;
        backup_status(st->backup, &b);
        prom_metric_u64(o, "hourglass_backup_in_progress", "gauge", "1 while a BACKUP copy runs.", (uint64_t)b.running);
        prom_metric_u64(o, "hourglass_backup_last_failed", "gauge",
                        "1 when the last BACKUP that ended failed or was stopped (INFO storage: backup_last_error).",
                        (uint64_t)(b.last == BACKUP_FAILED || b.last == BACKUP_STOPPED));
        prom_metric_u64(o, "hourglass_backup_last_success_timestamp_seconds", "gauge",
                        "When the last whole BACKUP copy finished (0: none since the broker started).",
                        b.last_ok_ms / 1000);
    }
    prom_metric_u64(o, "hourglass_wake_deferrals_total", "counter",
                    "Woken blocked PULLs left waiting because the clients' memory budget had no room for their reply.",
                    st->wake_deferrals);
    prom_metric_u64(o, "hourglass_closed_jobs_dropped_total", "counter",
                    "Commands of closed connections dropped without running: queued read-only ones and PULL BLOCKs.",
                    st->closed_jobs_dropped);
    buf_printf(o,
               "# HELP hourglass_store_broken 1 while the store is unusable.\n# TYPE hourglass_store_broken gauge\n"
               "hourglass_store_broken %d\n",
               store_broken(s));
    prom_hist_write(o, "hourglass_delivery_lateness_seconds", "Delivery time minus due time.", &st->lateness);
    prom_hist_write(o, "hourglass_commit_batch_jobs", "Jobs per group commit.", &st->batch_jobs);
    prom_hist_write(o, "hourglass_commit_seconds",
                    "Duration of one store write (the group commit; under fsync always its fdatasync is "
                    "hourglass_fsync_seconds).",
                    &st->commit_seconds);
    /* Under fsync no too (no observations): every family is on the page from the start (docs/metrics.md). */
    prom_hist_t fs;
    uint64_t last_us;
    syncer_fsync_stats(st->syncer, &fs, &last_us);
    prom_hist_write(o, "hourglass_fsync_seconds",
                    "Duration of one fdatasync of the write-ahead log (fsync always; none under fsync no): what an "
                    "acknowledged SEND waits for the disk.",
                    &fs);
}

void metrics_prom_loop(buf_t *o, const loop_info_t *li)
{
    prom_process_metrics(o, "hourglass", PACKAGE_VERSION);
    buf_printf(o,
               "# HELP hourglass_connected_clients Open client connections.\n"
               "# TYPE hourglass_connected_clients gauge\nhourglass_connected_clients %llu\n"
               "# HELP hourglass_blocked_clients Clients waiting in PULL BLOCK.\n"
               "# TYPE hourglass_blocked_clients gauge\nhourglass_blocked_clients %llu\n"
               "# HELP hourglass_uptime_seconds Seconds since start.\n"
               "# TYPE hourglass_uptime_seconds gauge\nhourglass_uptime_seconds %llu\n",
               (unsigned long long)li->connected_clients, (unsigned long long)li->blocked_clients,
               (unsigned long long)(li->uptime_ms / 1000));
    prom_metric_u64(o, "hourglass_connections_total", "counter", "Client connections accepted.", li->connections_total);
    prom_metric_u64(o, "hourglass_tls_connected_clients", "gauge", "Open client connections from tls-port.",
                    li->connected_tls_clients);
    prom_metric_u64(o, "hourglass_tls_connections_total", "counter", "Client connections accepted on tls-port.",
                    li->tls_connections_total);
    prom_metric_u64(o, "hourglass_tls_handshakes_in_progress", "gauge",
                    "TLS connections whose handshake is not done yet.", li->tls_handshakes_in_progress);
    prom_metric_u64(o, "hourglass_tls_handshakes_refused_total", "counter",
                    "TLS connections closed before a handshake: their address had tls-max-handshakes-per-address in "
                    "progress.",
                    li->tls_handshakes_refused);
    prom_metric_u64(o, "hourglass_tls_port", "gauge", "The TLS port the broker listens on (0: none).",
                    (uint64_t)li->tls_port);
    prom_metric_u64(o, "hourglass_rejected_connections_total", "counter", "Connections refused at max-clients.",
                    li->rejected_connections);
    prom_metric_u64(o, "hourglass_commands_total", "counter", "Commands processed.", li->commands_processed);
    prom_metric_u64(o, "hourglass_protocol_errors_total", "counter", "Connections closed on a protocol error.",
                    li->protocol_errors);
    prom_metric_u64(o, "hourglass_reply_buffer_disconnects_total", "counter", "Clients closed over max-reply-buffer.",
                    li->reply_buffer_kills);
    prom_metric_u64(o, "hourglass_client_memory_bytes", "gauge",
                    "Memory held for clients (input, requests in flight, unread replies) at the last sweep.",
                    li->client_memory);
    prom_metric_u64(o, "hourglass_client_memory_disconnects_total", "counter",
                    "Clients closed because all clients held more than max-client-memory.", li->memory_kills);
    prom_metric_u64(o, "hourglass_header_timeout_disconnects_total", "counter",
                    "Clients closed because a command was not complete within header-timeout.",
                    li->header_timeout_kills);
}
