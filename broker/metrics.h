/*
 * broker/metrics.h — counters, histograms, INFO text and Prometheus text.
 *
 * Two owners, no locks: storage_stats_t belongs to the storage thread (it is
 * updated by the jobs it runs and rendered by INFO / /metrics jobs on that
 * same thread); loop_info_t is filled by the event loop at reply time. INFO
 * and /metrics are assembled from both halves on the loop thread: the
 * storage part arrives as text in the completed job. The histogram type and
 * the Prometheus/INFO text writers are common/prom.h's.
 */
#ifndef HG_BROKER_METRICS_H
#define HG_BROKER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "broker/backup.h"
#include "broker/settings.h"
#include "common/prom.h"
#include "levels/store.h"

struct syncer;

/* Counters and histograms of the storage thread. */
typedef struct storage_stats {
    uint64_t started_ms;
    uint64_t sends, deliveries, acks, nacks, touches;
    uint64_t lease_expiries, retries, dlq_moves, requeued, dropped;
    uint64_t moved, made_ready;
    uint64_t dedup_hits, revoked; /* SEND … DEDUP answered with a live message's id; REVOKE */
    uint64_t batches, jobs, commits, commit_failures, reopens, maintain_work;
    uint64_t last_commit_us, max_batch;
    int disk_full;                /* writes refused until space returns (broker/diskguard.h) */
    uint64_t disk_free_bytes;     /* free space of the data directory's file system at the last check */
    uint64_t disk_full_events;    /* times the disk filled */
    uint64_t disk_full_refusals;  /* write commands refused while it was full */
    uint64_t wake_deferrals;      /* woken PULLs left parked for want of client memory (writer_set_wake_budget) */
    uint64_t closed_jobs_dropped; /* jobs of closed connections dropped unrun: read-only ones queued, PULL BLOCKs */
    uint64_t memory_trims;        /* freed memory given back to the kernel when idle after work (writer_thread.c) */
    uint64_t level_damage_events; /* levels the due move found damaged at their head (store_level_damage_events,
                                   * summed over the store's reopens) */
    uint64_t group_damage_events; /* group queues a PULL found damaged at their head (store_group_damage_events,
                                   * summed likewise) */
    uint64_t lane_full_hops;      /* due hops put back on their level by a full remainder lane (store_lane_full_hops,
                                   * summed likewise) */
    prom_hist_t lateness;         /* seconds: delivery time - due_ms */
    prom_hist_t batch_jobs;       /* jobs per group commit */
    prom_hist_t commit_seconds;   /* store_commit duration */
    backup_t *backup;             /* BACKUP's state (its own lock), or NULL */
    struct syncer *syncer;        /* the fsync thread under fsync always (its own lock: its fsync times), or NULL */
} storage_stats_t;

void storage_stats_init(storage_stats_t *s, uint64_t now_ms);

/* What the loop knows, for INFO server/clients/stats and /metrics. */
typedef struct loop_info {
    const config_t *cfg;
    int port;     /* the port actually bound (0: none) */
    int tls_port; /* the TLS port actually bound (0: none) */
    uint64_t uptime_ms;
    uint64_t connected_clients, blocked_clients;
    uint64_t connections_total, rejected_connections;
    uint64_t connected_tls_clients, tls_connections_total; /* of which from tls-port */
    uint64_t tls_handshakes_in_progress;                   /* TLS connections whose handshake is not done */
    uint64_t tls_handshakes_refused; /* closed before a handshake: tls-max-handshakes-per-address */
    uint64_t protocol_errors, reply_buffer_kills, idle_kills;
    uint64_t commands_processed;
    uint64_t jobs_queued, jobs_parked;
    uint64_t client_memory;        /* bytes all clients held at the last sweep */
    uint64_t memory_kills;         /* clients closed over max-client-memory */
    uint64_t header_timeout_kills; /* clients closed at header-timeout */
    /* security (docs/security.md) */
    int protected_mode, auth_required;
    uint64_t users, auth_failures, denied_connections;
    const char *security_warning; /* NULL: none */
} loop_info_t;

/* INFO sections, as a bit mask. */
enum {
    INFO_SERVER = 1,
    INFO_CLIENTS = 2,
    INFO_LEVELS = 4,
    INFO_GROUPS = 8,
    INFO_STORAGE = 16,
    INFO_STATS = 32,
    INFO_MEMORY = 64, /* used_memory & co (redis-cli --stat reads used_memory) */
    INFO_ALL = 127,
    /* Not a section: the caller may see the server's file-system paths (an
     * admin; CONFIG GET, which shows every path, is admin-only too). Without
     * it the fields that hold one (storage: dir, backup_last_error) show
     * INFO_HIDDEN: a viewer, producer or consumer learns no path. */
    INFO_PATHS = 128,
    /* Not a section: the groups section lists every group's line (INFO
     * groups, all, everything); without it (INFO, INFO default) at most
     * INFO_GROUPS_LISTED of them, the first by name, and groups_unlisted
     * says how many more there are: a plain INFO polled every second stays
     * small at 10 000 groups (1.1 MB with every line). */
    INFO_GROUPS_EVERY = 256
};
#define INFO_GROUPS_LISTED 100
#define INFO_HIDDEN        "(admin only)"

/* The mask for an INFO argument ("server", "all", "default", ...); 0 for an
 * unknown section (INFO then answers an empty string, as Redis). "groups",
 * "all" and "everything" include INFO_GROUPS_EVERY, "default" does not. */
int metrics_info_mask(const char *name, size_t len);

/* Storage thread: INFO sections levels, groups, storage and the storage half
 * of stats (the stats section is last, so the loop appends its half); the
 * paths only with INFO_PATHS in mask. */
void metrics_info_storage(buf_t *out, int mask, store_t *s, const storage_stats_t *st, uint64_t now_ms, size_t parked);

/* Loop thread: INFO server and clients (before the storage text) ... */
void metrics_info_loop_head(buf_t *out, int mask, const loop_info_t *li);
/* ... and the loop half of stats (after it). */
void metrics_info_loop_tail(buf_t *out, int mask, const loop_info_t *li);

/* Storage thread: the Prometheus text of the storage side; per-topic and
 * per-group series for at most max_topics topics (metrics-max-topics; < 0:
 * all), the first in name order. */
void metrics_prom_storage(buf_t *out, store_t *s, const storage_stats_t *st, uint64_t now_ms, long long max_topics);
/* Loop thread: the Prometheus text of the loop side. */
void metrics_prom_loop(buf_t *out, const loop_info_t *li);

#endif
