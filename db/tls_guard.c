/*
 * db/tls_guard.c — a Connector/C authentication plugin that refuses a
 * server whose greeting offers no TLS before the login is written
 * (contract: tls_guard.h).
 *
 * The plugin reads MYSQL.server_capabilities, which Connector/C fills from
 * the greeting before it runs the first plugin, and writes nothing when
 * CLIENT_SSL is missing. Registered once per copy of this module (the
 * process's plugin list is Connector/C's; a second copy finds the name
 * registered already and uses that one, which behaves the same).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "db/tls_guard.h"

#include "base/alloc.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <stdarg.h>

#include <errmsg.h>
#include <mysql/plugin_auth.h>

/* Debian 12's libmariadb-dev ships <mysql/client_plugin.h> without the
 * <ma_compress.h> it includes, so the header cannot be compiled: its
 * authentication plugin type (MYSQL_CLIENT_PLUGIN_HEADER and the one
 * method, interface 0x0100) and the register call are spelled out here,
 * field for field. */
#define GUARD_AUTHENTICATION_PLUGIN           2      /* MYSQL_CLIENT_AUTHENTICATION_PLUGIN */
#define GUARD_AUTHENTICATION_PLUGIN_INTERFACE 0x0100 /* MYSQL_CLIENT_AUTHENTICATION_PLUGIN_INTERFACE_VERSION */

struct guard_auth_plugin {
    int type;
    unsigned int interface_version;
    const char *name;
    const char *author;
    const char *desc;
    unsigned int version[3];
    const char *license;
    void *mysql_api;
    int (*init)(char *, size_t, int, va_list);
    int (*deinit)(void);
    int (*options)(const char *option, const void *);
    int (*authenticate_user)(MYSQL_PLUGIN_VIO *vio, MYSQL *mysql);
};

struct st_mysql_client_plugin;
struct st_mysql_client_plugin *mysql_client_register_plugin(MYSQL *mysql, struct st_mysql_client_plugin *plugin);

#define GUARD_NAME    "hourglass_tls_guard"
#define GUARD_REFUSAL "the server's greeting offers no TLS (CLIENT_SSL): refused before sending the login"

static int guard_authenticate(MYSQL_PLUGIN_VIO *vio, MYSQL *m)
{
    if (!(m->server_capabilities & CLIENT_SSL)) {
        m->net.last_errno = CR_SSL_CONNECTION_ERROR;
        snprintf(m->net.sqlstate, sizeof m->net.sqlstate, "HY000");
        snprintf(m->net.last_error, sizeof m->net.last_error, "%s", GUARD_REFUSAL);
        return CR_ERROR;
    }
    /* The first write sends the TLS request and starts TLS, then the login
     * (no auth data); the server answers with a switch to the account's
     * plugin, which Connector/C runs itself (CR_OK: it reads that answer). */
    return vio->write_packet(vio, NULL, 0) != 0 ? CR_ERROR : CR_OK;
}

static struct guard_auth_plugin guard_plugin = {
    GUARD_AUTHENTICATION_PLUGIN,
    GUARD_AUTHENTICATION_PLUGIN_INTERFACE,
    GUARD_NAME,
    "Hourglass",
    "Refuses a server without TLS before the login",
    { 1, 0, 0 },
    "",
    NULL,
    NULL,
    NULL,
    NULL,
    guard_authenticate,
};

static pthread_once_t registered = PTHREAD_ONCE_INIT;

static void register_guard(void)
{
    /* On a handle of its own: a refusal ("already loaded", by another copy
     * of this module) must not linger as a connection's error. */
    MYSQL *scratch = mysql_init(NULL);
    if (scratch == NULL) /* Connector/C's allocation failed: the one policy (base/alloc.h) */
        xalloc_oom(sizeof(MYSQL));
    mysql_client_register_plugin(scratch, (struct st_mysql_client_plugin *)&guard_plugin);
    mysql_close(scratch);
}

void db_tls_guard_arm(MYSQL *m)
{
    pthread_once(&registered, register_guard);
    mysql_options(m, MYSQL_DEFAULT_AUTH, GUARD_NAME);
}

int db_tls_guard_refused(MYSQL *m)
{
    return mysql_errno(m) == CR_SSL_CONNECTION_ERROR && strcmp(mysql_error(m), GUARD_REFUSAL) == 0;
}
