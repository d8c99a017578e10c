/*
 * console/db.c — the console's MariaDB handles and mysql-password-file
 * (contract: console.h).
 *
 * A libhourglass handle keeps the password it was opened with, also for
 * its own reconnects; so a rotated password (ALTER USER, the new one
 * written to mysql-password-file, the old connections killed) is taken by
 * opening the handle again. The file is read again at every open, after a
 * call failed because of MariaDB (a killed connection, a refused password)
 * and on SIGHUP; a handle whose password is older than the file's is
 * opened again before its next call. A file that cannot be read keeps the
 * last good password, warned about once per error. With mysql-password
 * (or no password) nothing is read: the handles never change.
 *
 * Threads: console_db and console_db_failed on the event loop's (c->db);
 * the rest on any (the password source has its own lock) — the sampler
 * opens its own handle with console_db_open.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"

void console_db_password_init(console_t *c)
{
    const console_config_t *cfg = c->cfg;
    passwd_source_init(&c->db_password, cfg->mysql_password_file,
                       cfg->mysql_password_file != NULL ? cfg->mysql_password_read : NULL);
}

void console_db_password_free(console_t *c)
{
    passwd_source_destroy(&c->db_password);
}

void console_db_password_refresh(console_t *c)
{
    passwd_source_refresh_logged(&c->db_password, "mysql-password-file", PASSWD_DB_NEXT_CONNECT_NOTE,
                                 PASSWD_DB_KEPT_NOTE);
}

int console_db_stale(console_t *c, unsigned long generation)
{
    if (!passwd_source_has_file(&c->db_password))
        return 0;
    return passwd_source_generation(&c->db_password) != generation;
}

hg_order_db *console_db_open(console_t *c, unsigned long *generation, hg_order_error_t *err)
{
    hg_order_db_params_t params;
    char password[PASSWD_FILE_MAX + 1];
    memset(&params, 0, sizeof params);
    DB_KEYS_TO_PARAMS(c->cfg, &params);
    *generation = 0;
    if (passwd_source_has_file(&c->db_password)) { /* a connect: the file is read again */
        console_db_password_refresh(c);
        *generation = passwd_source_get(&c->db_password, password, sizeof password);
        params.password = password;
    }
    hg_order_db *db = hg_order_db_open(&params, err);
    memset(password, 0, sizeof password);
    return db;
}

hg_order_db *console_db(console_t *c, hg_order_error_t *err)
{
    if (c->db != NULL && console_db_stale(c, c->db_generation)) {
        log_info("the MariaDB password changed: the console's connection reconnects with it");
        hg_order_db_close(c->db);
        c->db = NULL;
    }
    if (c->db == NULL)
        c->db = console_db_open(c, &c->db_generation, err);
    return c->db;
}

int console_db_failed(console_t *c, const hg_order_error_t *err)
{
    if (!passwd_source_has_file(&c->db_password) || !hg_order_error_is_database(err->code))
        return 0;
    console_db_password_refresh(c); /* a rotated password refused (1045), a killed connection … */
    return c->db != NULL && console_db_stale(c, c->db_generation);
}
