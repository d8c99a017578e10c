/*
 * cli/config.h — hourglass-cli's settings beyond the broker URI: the
 * MariaDB connection of the order commands (the mysql-* keys shared with the
 * daemons, db/keys.h), the topic of the orders' timeout messages, and the
 * file they may come from.
 *
 * Sources, later wins: the table's defaults, the file of --config (an INI
 * file of these keys: uri, order-topic, mysql-*), the global flags
 * (--mysql-database shop …). The broker URI keeps its own order: --uri/-u,
 * then $HOURGLASS_URI, then the file's uri, then the default.
 * Single-threaded.
 */
#ifndef HG_CLI_CONFIG_H
#define HG_CLI_CONFIG_H

#include <hourglass/order_view.h>

#include <stddef.h>

#include "common/cfg.h"
#include "db/keys.h"

typedef struct cli_config {
    char *uri;         /* NULL: not in the file */
    char *order_topic; /* default HG_ORDER_TIMEOUT_TOPIC */
    DB_KEYS_FIELDS;
} cli_config_t;

/* The key table (for cfg_* calls and --help). */
extern const cfg_table_t cli_config_table;

/* Defaults into a zeroed conf. */
void cli_config_init(cli_config_t *conf);

/* 1 when arg ("--mysql-user") names a key of the table settable as a global
 * flag (every key but uri, which is --uri). */
int cli_config_is_flag(const char *arg);

/* Open the order database from conf: mysql-database must be set. Returns the
 * handle, or NULL with the message in err ("mysql-database: required, not
 * set (give --mysql-database DB or a --config file)", or the connect error). */
hg_order_db *cli_config_open_db(const cli_config_t *conf, char *err, size_t errlen);

void cli_config_free(cli_config_t *conf);

#endif
