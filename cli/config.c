/*
 * cli/config.c — hourglass-cli's key table and the order database
 * (contract: config.h). The table engine is common/cfg.c's; the mysql-*
 * rows are db/keys.h's, the same as the daemons'. Single-threaded.
 */
#include "cli/config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define OFF(field) offsetof(cli_config_t, field)

static const cfg_key_t keys[] = {
    { CFG_KEY("uri", CFG_STRING, NULL, 0, 0, OFF(uri), "broker URI (--uri, $HOURGLASS_URI win over it)"),
      .secret = CFG_SECRET_URI },
    { CFG_KEY("order-topic", CFG_STRING, HG_ORDER_TIMEOUT_TOPIC, 0, 0, OFF(order_topic),
              "topic of the orders' timeout messages (orders overdue/show look there)") },
    DB_KEYS_ROWS(cli_config_t),
};

static const char *const sections[] = { "cli", "mysql", NULL };

const cfg_table_t cli_config_table = {
    .program = "hourglass-cli",
    .keys = keys,
    .count = sizeof(keys) / sizeof(keys[0]),
    .sections = sections,
    .strings_nonempty = 1,
};

void cli_config_init(cli_config_t *conf)
{
    cfg_init(&cli_config_table, conf);
}

int cli_config_is_flag(const char *arg)
{
    if (strncmp(arg, "--", 2) != 0)
        return 0;
    size_t n = strcspn(arg + 2, "=");
    for (size_t i = 1; i < cli_config_table.count; i++)
        if (strlen(keys[i].name) == n && strncmp(keys[i].name, arg + 2, n) == 0)
            return 1;
    return 0;
}

hg_order_db *cli_config_open_db(const cli_config_t *conf, char *err, size_t errlen)
{
    hg_order_db_params_t p;
    hg_order_error_t e;

    if (cfg_check_required(&cli_config_table, conf, err, errlen) < 0) {
        size_t len = strlen(err);
        snprintf(err + len, errlen - len, " (give --mysql-database DB, or a --config file with mysql-database)");
        return NULL;
    }
    if (DB_KEYS_CHECK(conf, err, errlen) < 0)
        return NULL;
    char password[PASSWD_FILE_MAX + 1];
    if (db_keys_credentials(conf->mysql_password, conf->mysql_password_file, password, sizeof password, err, errlen) <
        0)
        return NULL;
    memset(&p, 0, sizeof p);
    DB_KEYS_TO_PARAMS(conf, &p);
    if (conf->mysql_password_file != NULL)
        p.password = password; /* conf is const: read here, not into its mysql_password_read */
    hg_order_db *db = hg_order_db_open(&p, &e);
    if (db == NULL)
        snprintf(err, errlen, "MariaDB: %s", e.message);
    return db;
}

void cli_config_free(cli_config_t *conf)
{
    cfg_free(&cli_config_table, conf);
}
