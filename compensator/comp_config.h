/*
 * compensator/comp_config.h — hourglass-compensator's configuration.
 *
 * One table of keys (comp_config.c) for the engine in common/cfg.h: name,
 * type, default, range, help. An INI file (libinih; [sections] only group
 * keys for the reader) and `--key value` / `--key=value` flags set the same
 * keys, flags last. comp_config_validate checks everything that can be
 * checked without connecting and names the key of the first problem.
 *
 * Durations are "<digits><unit>", unit ms, s, m, h or d, stored in ms.
 */
#ifndef HG_COMPENSATOR_CONFIG_H
#define HG_COMPENSATOR_CONFIG_H

#include <stddef.h>

#include <hourglass/hourglass.h>

#include "common/cfg.h"
#include "common/log_keys.h"
#include "common/passwd.h"
#include "common/broker_keys.h"
#include "common/metrics_keys.h"
#include "common/tls_keys.h"
#include "db/keys.h"

/* The layers: an index each (stats, metrics, names) and a bit each in
 * comp_config_t.layers (1 << index). */
enum {
    COMP_LAYER_INDEX_RELAY,      /* outbox relay */
    COMP_LAYER_INDEX_OVERDUE,    /* overdue outbox cancel */
    COMP_LAYER_INDEX_INSPECTION, /* order-table inspection under the lock */
    COMP_LAYER_INDEX_MONITOR,    /* gauges, DLQ depth, alerts */
    COMP_LAYER_COUNT
};
#define COMP_LAYER_BIT(index) (1 << (index))

/* "relay", "overdue", "inspection", "monitor" for index 0..3. */
const char *comp_layer_name(int index);

#define COMP_MAX_DLQ_GROUPS 32
#define COMP_LOCK_NAME_MAX  64 /* GET_LOCK names: at most 64 characters */

typedef struct comp_config {
    /* broker */
    char *uri, *topic, *dlq_groups;
    TLS_KEYS_FIELDS;            /* the tls-* keys (hourglass+tls:// uri) */
    char *user, *password_file; /* credentials besides the URI's (docs/security.md) */
    unsigned long long broker_connect_timeout_ms, broker_timeout_ms;

    DB_KEYS_FIELDS; /* the mysql-* keys */

    /* layers */
    char *layers_text;
    unsigned long long relay_interval_ms, relay_batch, relay_backoff_base_ms, relay_backoff_cap_ms;
    double relay_backoff_factor, relay_backoff_jitter;
    unsigned long long overdue_interval_ms, overdue_grace_ms, overdue_batch;
    unsigned long long inspect_interval_ms, inspect_grace_ms, inspect_page_size, inspect_page_pause_ms;
    unsigned long long inspect_lock_timeout_ms;
    unsigned long long cancel_batch;                 /* orders per cancel transaction (overdue and inspection) */
    unsigned long long permanent_failure_backoff_ms; /* first pause of an order failing permanently (stuck.h) */
    char *lock_name;
    unsigned long long stop_grace_ms; /* a stop waits this long for MariaDB calls in flight, then cuts */

    /* monitoring and alerts */
    unsigned long long monitor_interval_ms;
    char *alert_command;
    unsigned long long alert_overdue_pending, alert_dlq_depth, alert_layer_failures, alert_min_interval_ms,
        alert_command_timeout_ms;

    unsigned long long metrics_port;
    char *metrics_bind;
    char *metrics_allowed_hosts; /* metrics-allowed-hosts: "a.example, b.example", or NULL */
    LOG_KEYS_FIELDS;             /* log-level, log-file, log-format (common/log_keys.h) */

    /* Derived by comp_config_validate. */
    int layers;                        /* COMP_LAYER_* bits */
    char *groups[COMP_MAX_DLQ_GROUPS]; /* dlq-groups split on blanks and commas */
    size_t group_count;
    char effective_lock_name[COMP_LOCK_NAME_MAX + 1]; /* lock-name, or the default built from the database */
    char password[PASSWD_FILE_MAX + 1];               /* read from password-file ("" without one) */
    cfg_origin_t origin;                              /* where each key was set (the errors of validation) */
} comp_config_t;

/* A broker password kept by a layer that opens its own client (the relay,
 * the monitor): password-file is read again before every open, so a
 * rotated password is used from the next (re)connect on. */
typedef struct comp_password {
    char text[PASSWD_FILE_MAX + 1];
    unsigned generation; /* comp_password_generation when last read */
} comp_password_t;

/* pw starts as the password validation read (cfg->password). Before the
 * layer threads start (its _new). */
void comp_password_init(const comp_config_t *cfg, comp_password_t *pw);

/* Before opening a broker client: read password-file (when set) into pw
 * and point opts->password at it (else opts keeps cfg's credentials). A file
 * that cannot be read now keeps the password read before, with a warning
 * logged. The layer's thread. */
void comp_password_refresh(const comp_config_t *cfg, comp_password_t *pw, hg_client_opts_t *opts);

/* 1 when a SIGHUP found a rotated password since pw was read: the layer
 * closes its client, and opens it again with the new one. */
int comp_password_stale(const comp_password_t *pw);

/* SIGHUP found another password in password-file (main thread). */
void comp_password_rotated(void);

/* The MariaDB password of mysql-password-file, read again at every
 * (re)connect: db/conn.h's connections ask for it through the password hook
 * (comp_db_password_hook), the cancels' libhourglass handles are opened
 * again when it changed (compensator/cancel.c). Without the key, nothing is
 * re-read and the connections keep mysql-password. */

/* Start with the password validation read (cfg->mysql_password_read), and
 * set the hook of db/conn.h. Main thread, before the layers start. */
void comp_db_password_init(const comp_config_t *cfg);

/* Read mysql-password-file again: a new password is logged (info) and
 * becomes the current one; a file that cannot be read keeps the last good
 * password, with a warning logged once per error (not per attempt). Any
 * thread. */
void comp_db_password_refresh(void);

/* Copy the current password into out[outlen] (PASSWD_FILE_MAX + 1 is
 * enough); its generation (it changes with the password), 0 without
 * mysql-password-file (out is then left alone). Any thread. */
unsigned long comp_db_password(char *out, size_t outlen);

/* Point opts at the broker credentials of cfg (user, and the password read
 * from password-file); the URI's stay when neither is set. */
void comp_config_client_credentials(const comp_config_t *cfg, hg_client_opts_t *opts);

/* Fill cfg with the defaults of the table. Free with comp_config_free. */
void comp_config_init(comp_config_t *cfg);

/* Free every string the config owns. */
void comp_config_free(comp_config_t *cfg);

/* Set one key from text (as a flag would). Returns 0, or -1 with err naming
 * the key. */
int comp_config_set(comp_config_t *cfg, const char *name, const char *value, char *err, size_t errlen);

/* The key table, for cfg_parse_args and --help. */
const cfg_table_t *comp_config_table(void);

/* Check the whole configuration and fill the derived fields. Returns 0, or
 * -1 with err naming the key of the first problem and where it was set
 * ("c.conf:14: relay-backoff-cap: … (relay-backoff-base: c.conf:12)": both
 * keys of a cross-key check, the one set last first). */
int comp_config_validate(comp_config_t *cfg, char *err, size_t errlen);

#endif
