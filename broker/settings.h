/*
 * broker/settings.h — the broker's configuration: one table of keys.
 * (Named settings, not config, so it never shadows autoconf's config.h.)
 *
 * Every key lives in one table {name, type, default, min, max, offset, help}
 * (config.c) for the engine in common/cfg.h. The same table drives the INI
 * file (libinih), the command-line flags (every key is also `--key value` /
 * `--key=value`), `--help`, `--check-config`, CONFIG GET and the sample
 * etc/hourglass-broker.conf. Precedence: defaults < config file < flags.
 * Value syntax by type: common/cfg.h; `levels` is a level table spec
 * (lvl_table_parse).
 *
 * The store's limits (level table, max-payload, max-delay, retention, ...)
 * have one home: config_t.store, the store_options_t filled once by
 * config_validate. The storage thread opens and reopens the store with it
 * and the loop thread's commands validate against it (store_send_validate),
 * so both threads see the same limits with the same wording.
 *
 * Read-only after start-up: both broker threads read it without locks. The
 * one exception is SIGHUP's config_reload on the loop thread, which may
 * change only the keys marked reloadable (log-level, log-file, log-format,
 * the tls-* files, tls-auth-clients and dedup-topics), which the storage
 * thread never reads.
 */
#ifndef HG_BROKER_SETTINGS_H
#define HG_BROKER_SETTINGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/cfg.h"
#include "common/log_keys.h"
#include "levels/store.h"
#include "levels/table.h"

#define CONFIG_MAX_KEYS 64 /* at least the table's keys (CONFIG GET's match array) */

/* tls-auth-clients (config_t.tls_auth_clients): the enum's order is the words'. */
#define TLS_AUTH_CLIENTS_WORDS "no|yes|optional"
enum {
    TLS_AUTH_NO = 0,
    TLS_AUTH_YES,
    TLS_AUTH_OPTIONAL
};

/* tls-auth-clients-user (config_t.tls_auth_clients_user). */
#define TLS_AUTH_CLIENTS_USER_WORDS "off|cn"
enum {
    TLS_USER_OFF = 0, /* a client certificate logs no one in */
    TLS_USER_CN       /* its subject's CN names the user it is logged in as */
};

typedef struct config {
    /* network */
    char *bind;
    long long port;
    int allow_remote;
    int allow_remote_plaintext; /* with TLS: clients from other hosts may use the plaintext port too */
    long long max_clients;
    long long idle_timeout_ms; /* 0 = off */
    long long tcp_backlog;
    /* TLS (common/tls_server.h) */
    long long tls_port;                                    /* 0 = off; with it set, port 0 = no plaintext listener */
    long long tls_max_handshakes_per_address;              /* 0 = no limit (broker/conn.h) */
    char *tls_cert_file, *tls_key_file, *tls_ca_cert_file; /* NULL: unset */
    char *tls_crl_file;                                    /* NULL: no revocation check */
    int tls_auth_clients;                                  /* TLS_AUTH_NO | YES | OPTIONAL */
    int tls_auth_clients_user;                             /* TLS_USER_OFF | CN */
    char *users_file;                                      /* NULL: no users, no AUTH (broker/users.h) */
    /* storage */
    char *dir;
    char *levels;     /* the spec as written (parsed into store.levels) */
    int fsync_always; /* fsync always (1) | no (0) */
    long long cache_size;
    long long write_buffer_size;
    long long max_open_files;
    long long commitlog_segment_size; /* bytes per commit-log segment (store_check_segment_bytes) */
    long long disk_reserve;           /* bytes of DIR/BALLAST, given back when the disk fills (0 = none) */
    char *backup_dir;                 /* BACKUP copies go here; NULL: BACKUP is refused */
    long long backup_rate;            /* bytes of records a BACKUP copies per second (0: no limit) */
    long long damage_retry_ms;        /* store.damage_retry_ms */
    /* messages */
    long long lease_ms;
    long long lease_write_delay_ms; /* store.lease_write_delay_ms */
    long long max_reconsume;
    long long retention_ms;
    long long max_delay_ms;
    long long max_pull_count;
    long long max_pull_bytes;
    long long max_topics; /* store.max_topics (0: no limit) */
    long long max_groups; /* store.max_groups (0: no limit) */
    char *dedup_topics;   /* NULL: none; topic names (blanks between), "*": every topic. Loop thread only
                           (reloadable): config_dedup_topic */
    /* limits */
    long long max_payload;
    long long max_args;
    long long max_bulk;
    long long max_inline;
    long long max_query;
    long long max_reply_buffer;
    long long max_inflight_bytes; /* request bytes per connection awaiting replies before parsing pauses */
    long long max_client_memory;  /* all clients' buffers; the biggest is closed above it (0 = off) */
    long long header_timeout_ms;  /* a command must be complete this long after its first byte (0 = off) */
    long long auth_timeout_ms;    /* users-file: a client must be logged in this long after it connected (0 = off) */
    /* observability */
    long long metrics_port; /* 0 = off */
    char *metrics_bind;
    char *metrics_allowed_hosts;  /* metrics-allowed-hosts: "a.example, b.example", or NULL */
    long long metrics_max_topics; /* per-topic (and their groups') series for at most this many topics */
    LOG_KEYS_FIELDS;              /* log-level, log-file, log-format */
    /* derived by config_validate from the keys above */
    store_options_t store;   /* the one copy of the store's options and limits */
    const char *check_data;  /* --check-data DIR (argv's), else NULL */
    const char *config_path; /* --config FILE (argv's), else NULL: named by --check-config's last line */
} config_t;

/* What the command line asked for besides key values. */
typedef enum config_action {
    CONFIG_RUN = 0,    /* start the broker */
    CONFIG_CHECK,      /* --check-config: validate, print, exit */
    CONFIG_CHECK_DATA, /* --check-data DIR: check the data directory, exit */
    CONFIG_HELP,       /* --help */
    CONFIG_VERSION     /* --version */
} config_action_t;

/* Fill c with the defaults. Never fails (aborts on out-of-memory). */
void config_init_defaults(config_t *c);

/* Release the strings c owns. */
void config_free(config_t *c);

/* Parse argv (flags and --config FILE, read first wherever it appears),
 * load the file, apply the flags over it, then cross-check the whole
 * (config_validate). `--check-data DIR` (or `--check-data=DIR`) sets dir to
 * DIR and *action to CONFIG_CHECK_DATA. 0 and *action on success; -1 with
 * the message in err[errlen] (naming the key, the file and line, or the
 * flag). */
int config_load(config_t *c, int argc, char **argv, config_action_t *action, char *err, size_t errlen);

/* Cross-key checks: the level table parses, max-bulk >= max-payload,
 * max-query > max-bulk, a non-loopback metrics-bind needs allow-remote. On success
 * c->store holds the store options (path = c->dir, create_if_missing = 1). */
int config_validate(config_t *c, char *err, size_t errlen);

/* The commit log is checkpointed every disk-reserve / CONFIG_RESERVE_CHECKPOINTS
 * bytes (STORE_CHECKPOINT_BYTES at most, and without a reserve): after a
 * write failed on a full disk the store reopens on the room the released
 * reserve gives, and redoes the log since its last checkpoint into LevelDB
 * while LevelDB's recovery writes its own log out to a table — a quarter
 * leaves that room for the redo, the one apply that crossed the checkpoint
 * and the recovery. config_validate refuses a reserve other than 0 below
 * CONFIG_RESERVE_CHECKPOINTS * STORE_CHECKPOINT_MIN_BYTES (4 MiB). */
#define CONFIG_RESERVE_CHECKPOINTS 4
uint64_t config_checkpoint_bytes(uint64_t disk_reserve);

/* 1 when topic[0..len) is one of dedup-topics (or dedup-topics is "*"): its
 * SENDs with a KEY deduplicate as if they said DEDUP. Loop thread (SIGHUP
 * may change the list). */
int config_dedup_topic(const config_t *c, const char *topic, size_t len);

/* The same test on a copy of the list (NULL: empty), for a thread that must
 * not read the live configuration (TOPICS on the storage thread). */
int config_topic_listed(const char *list, const char *topic, size_t len);

/* 1 when clients can connect with TLS (protected mode needs it to let remote
 * clients in without allow-remote; docs/security.md). */
int config_tls_enabled(const config_t *c);

/* SIGHUP: re-read the configuration from argc/argv (the ones the broker
 * started with: the same file, the flags still win) and apply the
 * reloadable keys (log-level, log-file, log-format: log_keys_apply) to c, logging what changed
 * (common/reload.h's reload_config). Returns the number of keys applied, or -1
 * when the new configuration is invalid (logged; c unchanged). Loop thread
 * only. */
int config_reload(config_t *c, int argc, char **argv);

/* --help text generated from the table. */
void config_print_help(FILE *out, const char *prog);

/* --check-config's report: the effective configuration as an INI file under
 * [broker] that reads back, ending with the comment "; hourglass-broker:
 * configuration OK (FILE)" (common/cfg.h, cfg_print_check: what cannot be
 * printed is said on stderr). Returns how many values were not printable. */
int config_print(const config_t *c, FILE *out);

/* Number of keys, key i's name, and its effective value as text into
 * buf[len] (CONFIG GET; "" for an index out of range). */
int config_key_count(void);
const char *config_key_name(int i);
void config_key_value(const config_t *c, int i, char *buf, size_t len);

#endif
