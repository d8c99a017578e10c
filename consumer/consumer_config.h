/*
 * consumer/consumer_config.h — hourglass-consumer's configuration: the
 * struct the key table (consumer_config.c) fills, and what the program
 * derives from it (the SQL, the MariaDB parameters, the consumer loop's
 * options). Main thread, at start-up.
 */
#ifndef HG_CONSUMER_CONSUMER_CONFIG_H
#define HG_CONSUMER_CONSUMER_CONFIG_H

#include <hourglass/hourglass.h>
#include <hourglass/order.h>

#include <stddef.h>
#include <stdio.h>

#include "common/cfg.h"
#include "common/log_keys.h"
#include "common/passwd.h"
#include "common/broker_keys.h"
#include "common/metrics_keys.h"
#include "common/tls_keys.h"
#include "db/keys.h"

#define PROGRAM     "hourglass-consumer"
#define EXIT_CONFIG CFG_EXIT_CONFIG /* a usage or configuration error */

typedef struct consumer_config {
    char *uri, *group, *topic;
    TLS_KEYS_FIELDS;            /* the tls-* keys (hourglass+tls:// uri) */
    char *user, *password_file; /* credentials besides the URI's (docs/security.md) */
    unsigned long long workers, count, batch_size, block_ms, lease_ms, touch_ms;
    unsigned long long stop_grace_ms; /* a stop waits this long for cancels in flight, then cuts */

    DB_KEYS_FIELDS; /* the mysql-* keys */

    char *claim_sql, *lookup_sql, *cancel_reason;
    char *side_effect_sql[HG_ORDER_SQL_MAX_SIDE_EFFECTS];
    size_t side_effect_count;
    int side_effect_source; /* which source set the list: a new source replaces it */
    int side_effect_none;   /* that source said "none": a statement besides it is refused */

    unsigned long long retry_base_ms, retry_cap_ms, retry_attempts;
    double retry_factor, retry_jitter;

    unsigned long long metrics_port;
    char *metrics_bind;
    char *metrics_allowed_hosts;                  /* metrics-allowed-hosts: "a.example, b.example", or NULL */
    unsigned long long broker_unhealthy_after_ms; /* /healthz: every PULL failing this long */
    LOG_KEYS_FIELDS;                              /* log-level, log-file, log-format */

    /* Filled by consumer_config_credentials: the broker connection's options
     * (timeouts default; user and the password read from password-file). */
    hg_client_opts_t client_opts;
    char password[PASSWD_FILE_MAX + 1];
} consumer_config_t;

/* The key table, for cfg_parse_args. */
const cfg_table_t *consumer_config_table(void);

/* Fill cfg with the table's defaults and the library's SQL (the reference
 * schema's statements). Free with consumer_config_free. */
void consumer_config_init(consumer_config_t *cfg);

/* Free every string the config owns. */
void consumer_config_free(consumer_config_t *cfg);

/* Everything checkable without connecting: required keys, the SQL (the
 * library's checks), cancel-reason's length, retry-cap >= retry-base,
 * mysql-socket, the URI and the loop's options (the library checks them).
 * Returns 0, or -1 with err naming the field. */
int consumer_config_validate(const consumer_config_t *cfg, char *err, size_t errlen);

/* Read password-file (when set) into cfg->password and point
 * cfg->client_opts at user and password, so consumer_config_loop_opts's
 * consumer logs in with them. Returns 0, or -1 with err naming the file and
 * the problem. */
int consumer_config_credentials(consumer_config_t *cfg, char *err, size_t errlen);

/* The configured statements; the pointers are into cfg. */
void consumer_config_sql(const consumer_config_t *cfg, hg_order_sql_t *sql);

/* The connection parameters (strings point into cfg) with sql attached,
 * and the idle-transaction bound (these are the cancel connections). */
void consumer_config_db_params(const consumer_config_t *cfg, const hg_order_sql_t *sql, hg_order_db_params_t *p);

/* The consumer loop's options from cfg (no handler yet; logging through
 * common/log.h). The PULL COUNT is max(count, batch-size). Its client options
 * (the tls-* keys) go into *client, which o points to and which must outlive
 * the consumer made from o. */
void consumer_config_loop_opts(const consumer_config_t *cfg, hg_consumer_opts_t *o, hg_client_opts_t *client);

/* Give c (made from consumer_config_loop_opts' options) the consumer's
 * connection-event hook: a worker that connects or reconnects ends the
 * broker's outage in the log (common/log_limit.h's recovery line), unless
 * the broker refuses a worker's PULLs with an error reply (HG_CONN_REFUSED);
 * then the first PULL answered after them ends it (HG_CONN_ANSWERED). Starts
 * c with no worker refused, so one consumer at a time: after
 * hg_consumer_new, before hg_consumer_run, once the previous consumer's
 * hg_consumer_run returned. */
void consumer_config_loop_events(hg_consumer_t *c);

/* --help: usage, the keys with their defaults, the exit status. */
void consumer_config_usage(FILE *out);

/* /healthz's stuck bound (ms): the longest one MariaDB round trip of a
 * worker (its connect, a statement, a COMMIT) may wait on a server that
 * answers — the larger of mysql-lock-wait-timeout (the server's 50 s when 0)
 * and mysql-connect-timeout — plus 5 s. Pure. */
unsigned long long consumer_stuck_after_ms(const consumer_config_t *cfg);

#endif
