/*
 * db/conn.c — one MariaDB connection with lazily prepared statements, and
 * the error classification (contract: conn.h).
 *
 * Invariant: c->m is NULL or a live connection set up by db_connect; every
 * db_stmt_t in c->stmts has st != NULL only while c->m is the connection it
 * was prepared on. db_disconnect closes the statements before the
 * connection, so a reconnect always re-prepares. c->fd is c->m's socket
 * while c->m is set and -1 otherwise; it is published and withdrawn under
 * c->cut_lock, withdrawn before the socket is closed, so db_interrupt never
 * shuts down a descriptor number that was closed and reused meanwhile.
 *
 * Used by one thread at a time per connection (the caller's); db_interrupt
 * alone may come from another thread (it touches only fd and interrupted,
 * under cut_lock, never the MYSQL handle).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "db/conn.h"

#include <stdarg.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <errmsg.h>
#include <mysqld_error.h>

#include "base/alloc.h"
#include "base/tls_policy.h"
#include "db/tls_guard.h"

#define DB_MAX_STMTS 16 /* statements one connection prepares (the order handle: 13 at most) */

struct db_conn {
    MYSQL *m; /* NULL while disconnected */
    unsigned long connection_id;
    uint64_t connects;
    uint64_t commits_unknown; /* COMMITs that failed with the connection lost or in doubt (DB_LOST) */
    unsigned flags;
    char role[32]; /* "" or "relay"; messages read "relay: what: …" */
    char *host, *socket, *user, *password, *database;
    hg_order_tls_t tls;                               /* HG_ORDER_TLS_OFF / _ON / _VERIFY */
    char *tls_ca_file, *tls_cert_file, *tls_key_file; /* NULL: unset */
    unsigned port, connect_timeout_s, read_timeout_s, write_timeout_s, lock_wait_timeout_s, idle_transaction_timeout_s;
    unsigned idle_timeout_s; /* db_set_idle_timeout: the session's wait_timeout (0: the server's) */
    db_stmt_t *stmts[DB_MAX_STMTS];
    size_t stmt_count;
    pthread_mutex_t cut_lock; /* guards fd and interrupted (db_interrupt comes from another thread) */
    int fd;                   /* m's socket, -1 while disconnected */
    int interrupted;          /* db_interrupt ran: no connect from now on */
    void (*progress)(void *); /* db_set_progress: each round trip answered */
    void *progress_arg;
};

/* ---------------------------------------------------------------- errors */

/* The server errors that are about the moment, not the statement; the
 * client errors 2000-2999 are DB_LOST by range (db_classify). */
static const struct {
    unsigned code;
    db_class_t cls;
} server_errors[] = {
    { ER_LOCK_DEADLOCK, DB_TRANSIENT },        /* 1213: the server rolled the transaction back */
    { ER_LOCK_WAIT_TIMEOUT, DB_TRANSIENT },    /* 1205: the statement was rolled back, we roll back the rest */
    { ER_QUERY_INTERRUPTED, DB_TRANSIENT },    /* 1317: KILL QUERY */
    { ER_STATEMENT_TIMEOUT, DB_TRANSIENT },    /* 1969: max_statement_time */
    { ER_CON_COUNT_ERROR, DB_TRANSIENT },      /* 1040: too many connections */
    { ER_OPTION_PREVENTS_STATEMENT, DB_LOST }, /* 1290: --read-only: a demoted primary after a fail-over, which
                                                     * a new connection leaves (DNS, a proxy); this one never would */
    { ER_NEED_REPREPARE, DB_TRANSIENT },       /* 1615: a table changed under a prepared statement */
    /* The set-up is wrong (db_setup_hint): a GRANT revoked, a table renamed by a
     * migration. Not the order's fault: waiting (and /healthz saying the fix)
     * beats failing every message that arrives meanwhile for good. */
    { ER_DBACCESS_DENIED_ERROR, DB_TRANSIENT },     /* 1044 */
    { ER_ACCESS_DENIED_ERROR, DB_TRANSIENT },       /* 1045 */
    { ER_BAD_DB_ERROR, DB_TRANSIENT },              /* 1049 */
    { ER_TABLEACCESS_DENIED_ERROR, DB_TRANSIENT },  /* 1142 */
    { ER_COLUMNACCESS_DENIED_ERROR, DB_TRANSIENT }, /* 1143 */
    { ER_NO_SUCH_TABLE, DB_TRANSIENT },             /* 1146 */
    /* The disk under the datadir is full (or a tablespace reached its size
     * limit): the cancel succeeds once there is room. As permanent, every
     * message of those seconds went to the DLQ and its order stayed pending. */
    { ER_DISK_FULL, DB_TRANSIENT },                /* 1021 */
    { ER_RECORD_FILE_FULL, DB_TRANSIENT },         /* 1114: "The table '…' is full" */
    { ER_CONNECTION_KILLED, DB_LOST },             /* 1927: KILL CONNECTION */
    { DB_ER_CLIENT_INTERACTION_TIMEOUT, DB_LOST }, /* 4031: disconnected for inactivity (10.11) */
    { ER_SERVER_SHUTDOWN, DB_LOST },               /* 1053: server shutdown in progress */
};

int db_is_client_error(unsigned code)
{
    return code >= 2000 && code < 3000;
}

db_class_t db_classify(unsigned code)
{
    if (db_is_client_error(code)) /* gone away, lost, cannot connect … */
        return DB_LOST;
    for (size_t i = 0; i < sizeof server_errors / sizeof server_errors[0]; i++)
        if (server_errors[i].code == code)
            return server_errors[i].cls;
    return DB_PERMANENT;
}

const char *db_setup_hint(unsigned code)
{
    switch (code) {
    case ER_ACCESS_DENIED_ERROR: /* 1045 */
        return "the server refused the login: check mysql-user and mysql-password (or what mysql-password-file "
               "holds), and that the user exists for this host (CREATE USER … IDENTIFIED BY …, "
               "docs/getting-started.md)";
    case ER_DBACCESS_DENIED_ERROR: /* 1044 */
        return "mysql-user has no rights on mysql-database: GRANT them (docs/getting-started.md lists each "
               "program's GRANTs)";
    case ER_BAD_DB_ERROR: /* 1049 */
        return "mysql-database does not exist: create it and load sql/schema.sql, or correct mysql-database";
    case ER_TABLEACCESS_DENIED_ERROR:  /* 1142 */
    case ER_COLUMNACCESS_DENIED_ERROR: /* 1143 */
        return "mysql-user lacks a GRANT this statement needs (docs/getting-started.md lists each program's GRANTs)";
    case ER_NO_SUCH_TABLE: /* 1146 */
        return "the table does not exist: load the reference schema (sql/schema.sql) into mysql-database";
    case CR_AUTH_PLUGIN_CANNOT_LOAD: /* 2059 */
        return "the server asks for the account's authentication plugin and the client library cannot load its "
               "client side (the message names it and the file tried): install it (Debian: libmariadb3 ships "
               "client_ed25519, dialog for PAM, caching_sha2_password) or point MARIADB_PLUGIN_DIR at its directory";
    case ER_DISK_FULL:        /* 1021 */
    case ER_RECORD_FILE_FULL: /* 1114 */
        return "MariaDB cannot grow the table: the disk under its data directory is full (or a tablespace reached "
               "its size limit): free space there (more than innodb_autoextend_increment), and cancels resume by "
               "themselves (docs/operations.md, \"MariaDB's disk full\")";
    default:
        return NULL;
    }
}

void db_error_set(hg_order_error_t *err, const char *fmt, ...)
{
    if (err == NULL)
        return;
    err->code = 0;
    err->sqlstate[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

/* 1 when m's error text is Connector/C's "Plugin NAME could not be loaded"
 * (CR_AUTH_PLUGIN_CANNOT_LOAD): the server switched the login to an
 * authentication plugin whose client side is not there. Connector/C then
 * answers the server with empty packets and keeps that text, but the
 * number becomes the server's refusal (1045), which would blame the
 * password. */
static int client_plugin_unloadable(MYSQL *m)
{
    const char *msg = mysql_error(m);
    return strncmp(msg, "Plugin ", 7) == 0 && strstr(msg, " could not be loaded") != NULL;
}

/* Fill err from st / m, with prefix ("relay: ") before what. */
static void error_from(hg_order_error_t *err, const char *prefix, const char *what, MYSQL *m, MYSQL_STMT *st)
{
    if (err == NULL)
        return;
    unsigned code = st != NULL ? mysql_stmt_errno(st) : m != NULL ? mysql_errno(m) : CR_SERVER_LOST;
    const char *msg = st != NULL ? mysql_stmt_error(st) : m != NULL ? mysql_error(m) : "not connected";
    const char *state = st != NULL ? mysql_stmt_sqlstate(st) : m != NULL ? mysql_sqlstate(m) : "HY000";
    if (st == NULL && m != NULL && client_plugin_unloadable(m)) { /* the text's own number, not the server's */
        code = CR_AUTH_PLUGIN_CANNOT_LOAD;
        state = "HY000";
    }
    if (code == 0) { /* a failure the library did not explain: never report "0 success" */
        code = CR_UNKNOWN_ERROR;
        msg = "unknown error (the client library gave no error number)";
        state = "HY000";
    }
    err->code = code;
    snprintf(err->sqlstate, sizeof err->sqlstate, "%s", state != NULL ? state : "");
    snprintf(err->message, sizeof err->message, "%s%s: %u %s", prefix, what, code, msg);
}

void db_error_mysql(hg_order_error_t *err, const char *what, MYSQL *m, MYSQL_STMT *st)
{
    error_from(err, "", what, m, st);
}

/* ---------------------------------------------------------------- the connection */

static char *dup_or_null(const char *s)
{
    return s != NULL ? xstrdup(s) : NULL;
}

static int (*password_hook)(void *arg, char *out, size_t outlen); /* db_set_password_hook */
static void *password_hook_arg;

void db_set_password_hook(int (*hook)(void *arg, char *out, size_t outlen), void *arg)
{
    password_hook = hook;
    password_hook_arg = arg;
}

db_conn_t *db_conn_new(const hg_order_db_params_t *p, const char *role, unsigned flags)
{
    db_conn_t *c = xcalloc(1, sizeof *c);
    if (role != NULL && role[0] != '\0')
        snprintf(c->role, sizeof c->role, "%s: ", role);
    c->flags = flags;
    c->host = dup_or_null(p->host);
    c->socket = dup_or_null(p->socket);
    c->user = dup_or_null(p->user);
    c->password = dup_or_null(p->password);
    c->database = dup_or_null(p->database);
    c->port = p->port;
    c->connect_timeout_s = p->connect_timeout_s ? p->connect_timeout_s : DB_DEFAULT_CONNECT_TIMEOUT_S;
    c->read_timeout_s = p->read_timeout_s ? p->read_timeout_s : DB_DEFAULT_READ_TIMEOUT_S;
    c->write_timeout_s = p->write_timeout_s ? p->write_timeout_s : DB_DEFAULT_WRITE_TIMEOUT_S;
    c->lock_wait_timeout_s = p->lock_wait_timeout_s;
    c->idle_transaction_timeout_s = p->idle_transaction_timeout_s;
    c->tls = p->tls;
    c->tls_ca_file = dup_or_null(p->tls_ca_file);
    c->tls_cert_file = dup_or_null(p->tls_cert_file);
    c->tls_key_file = dup_or_null(p->tls_key_file);
    pthread_mutex_init(&c->cut_lock, NULL);
    c->fd = -1;
    return c;
}

void db_set_idle_timeout(db_conn_t *c, unsigned seconds)
{
    c->idle_timeout_s = seconds;
}

int db_drop_if_closed(db_conn_t *c)
{
    if (c->m == NULL)
        return 0;
    struct pollfd p = { .fd = (int)mysql_get_socket(c->m), .events = POLLIN | POLLPRI | POLLRDHUP };
    int rc;
    do
        rc = poll(&p, 1, 0);
    while (rc < 0 && errno == EINTR);
    if (rc <= 0)
        return 0;
    db_disconnect(c); /* EOF, a reset, or the server's "disconnected for inactivity" packet */
    return 1;
}

void db_drop_statements(db_conn_t *c)
{
    for (size_t i = 0; i < c->stmt_count; i++)
        if (c->stmts[i]->st != NULL) {
            mysql_stmt_close(c->stmts[i]->st);
            c->stmts[i]->st = NULL;
        }
}

void db_disconnect(db_conn_t *c)
{
    db_drop_statements(c);
    pthread_mutex_lock(&c->cut_lock); /* withdrawn before mysql_close frees the descriptor number */
    c->fd = -1;
    pthread_mutex_unlock(&c->cut_lock);
    if (c->m != NULL)
        mysql_close(c->m);
    c->m = NULL;
    c->connection_id = 0;
}

void db_interrupt(db_conn_t *c)
{
    pthread_mutex_lock(&c->cut_lock);
    c->interrupted = 1;
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR); /* the owner's blocked read or write returns at once: 2013 */
    pthread_mutex_unlock(&c->cut_lock);
}

int db_in_transaction(db_conn_t *c)
{
    unsigned status = 0;
    if (c->m == NULL || mariadb_get_info(c->m, MARIADB_CONNECTION_SERVER_STATUS, &status) != 0)
        return c->m != NULL; /* connected but cannot tell: assume one is open */
    return (status & SERVER_STATUS_IN_TRANS) != 0;
}

void db_conn_free(db_conn_t *c)
{
    if (c == NULL)
        return;
    db_disconnect(c);
    free(c->host);
    free(c->socket);
    free(c->user);
    if (c->password != NULL)
        memset(c->password, 0, strlen(c->password));
    free(c->password);
    free(c->database);
    free(c->tls_ca_file);
    free(c->tls_cert_file);
    free(c->tls_key_file);
    pthread_mutex_destroy(&c->cut_lock);
    free(c);
}

MYSQL *db_mysql(db_conn_t *c)
{
    return c->m;
}

unsigned long db_connection_id(const db_conn_t *c)
{
    return c->m != NULL ? c->connection_id : 0;
}

uint64_t db_connects(const db_conn_t *c)
{
    return c->connects;
}

uint64_t db_commits_unknown(const db_conn_t *c)
{
    return c->commits_unknown;
}

void db_set_progress(db_conn_t *c, void (*fn)(void *arg), void *arg)
{
    c->progress = fn;
    c->progress_arg = arg;
}

void db_progress(db_conn_t *c)
{
    if (c->progress != NULL)
        c->progress(c->progress_arg);
}

db_class_t db_fail(db_conn_t *c, const char *what, MYSQL_STMT *st, hg_order_error_t *err)
{
    db_progress(c); /* every failure is an answer too (a lock wait timeout, a deadlock, a lost connection) */
    unsigned code = st != NULL ? mysql_stmt_errno(st) : c->m != NULL ? mysql_errno(c->m) : CR_SERVER_LOST;
    error_from(err, c->role, what, c->m, st);
    db_class_t cls = db_classify(code != 0 ? code : CR_UNKNOWN_ERROR);
    if (cls == DB_LOST)
        db_disconnect(c);
    return cls;
}

int db_server_is_mariadb(const char *server_info)
{
    return server_info != NULL && strstr(server_info, "MariaDB") != NULL;
}

/* SET SESSION name = value; 0, or -1 with err naming the variable. */
static int set_session(db_conn_t *c, const char *name, unsigned value, hg_order_error_t *err)
{
    char sql[96], what[64];
    snprintf(sql, sizeof sql, "SET SESSION %s = %u", name, value);
    if (mysql_query(c->m, sql) != 0) {
        snprintf(what, sizeof what, "SET %s", name);
        db_fail(c, what, NULL, err);
        return -1;
    }
    return 0;
}

/* The session settings after connecting, as statements (so an error names
 * the one that failed). */
static int session_setup(db_conn_t *c, hg_order_error_t *err)
{
    if (mysql_autocommit(c->m, (c->flags & DB_AUTOCOMMIT) ? 1 : 0) != 0) {
        db_fail(c, "autocommit", NULL, err);
        return -1;
    }
    /* READ COMMITTED: a locking read takes record locks only, no gap locks,
     * so a SELECT … FOR UPDATE never blocks an insert next to the rows it
     * holds; and every plain read sees the latest committed data. */
    if ((c->flags & DB_READ_COMMITTED) &&
        mysql_query(c->m, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED") != 0) {
        db_fail(c, "SET TRANSACTION ISOLATION LEVEL", NULL, err);
        return -1;
    }
    if (c->lock_wait_timeout_s > 0 && set_session(c, "innodb_lock_wait_timeout", c->lock_wait_timeout_s, err) != 0)
        return -1;
    /* db_set_idle_timeout: the server closes the connection after this long
     * without a statement (a frozen GET_LOCK holder loses the lock). */
    if (c->idle_timeout_s > 0 && set_session(c, "wait_timeout", c->idle_timeout_s, err) != 0)
        return -1;
    /* A transaction left idle this long (its process frozen between a claim
     * and its COMMIT) is rolled back and the connection closed by the server
     * (MariaDB 10.3+: idle_transaction_timeout), so its row locks do not
     * outlive the pause. MySQL has no such variable (setting it fails with
     * 1193, and so would every connect): there the bound is not applied. */
    if (c->idle_transaction_timeout_s > 0 && db_server_is_mariadb(mysql_get_server_info(c->m)) &&
        set_session(c, "idle_transaction_timeout", c->idle_transaction_timeout_s, err) != 0)
        return -1;
    return 0;
}

/* The TLS options of a connect (hg_order_tls_t): nothing when off; else
 * TLS required, TLS 1.2 minimum, base/tls_policy.h's suites for TLS 1.2
 * (TLS 1.3's are all AEAD and left to OpenSSL), the CA and the client
 * certificate when given, for verify the certificate and name check, and
 * for both db/tls_guard.h's refusal of a server whose greeting offers no
 * TLS, before the login is sent (Connector/C 3.3 alone refuses it for
 * verify only: with on it sends the login in plaintext). */
static void tls_options(const db_conn_t *c, MYSQL *m)
{
    if (c->tls == HG_ORDER_TLS_OFF)
        return;
    my_bool on = 1, verify = c->tls == HG_ORDER_TLS_VERIFY;
    mysql_options(m, MYSQL_OPT_SSL_ENFORCE, &on);
    mysql_options(m, MARIADB_OPT_TLS_VERSION, "TLSv1.2,TLSv1.3");
    mysql_options(m, MYSQL_OPT_SSL_CIPHER, HG_TLS12_CIPHERS);
    if (c->tls_ca_file != NULL)
        mysql_options(m, MYSQL_OPT_SSL_CA, c->tls_ca_file);
    if (c->tls_cert_file != NULL)
        mysql_options(m, MYSQL_OPT_SSL_CERT, c->tls_cert_file);
    if (c->tls_key_file != NULL)
        mysql_options(m, MYSQL_OPT_SSL_KEY, c->tls_key_file);
    mysql_options(m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
    db_tls_guard_arm(m);
}

/* The server c connects to, for messages: the socket's path, host:port
 * (3306 when the port is 0) or "localhost" (Connector/C's default socket). */
static void server_name(const db_conn_t *c, char *out, size_t len)
{
    if (c->socket != NULL)
        snprintf(out, len, "%s", c->socket);
    else if (c->host != NULL && strcmp(c->host, "localhost") != 0)
        snprintf(out, len, "%s:%u", c->host, c->port != 0 ? c->port : 3306u);
    else
        snprintf(out, len, "localhost (the default unix socket)");
}

/* A refused connect: err gets code, SQLSTATE HY000 and the role, then the
 * formatted message. */
static void connect_refused(const db_conn_t *c, unsigned code, hg_order_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void connect_refused(const db_conn_t *c, unsigned code, hg_order_error_t *err, const char *fmt, ...)
{
    if (err == NULL)
        return;
    err->code = code;
    snprintf(err->sqlstate, sizeof err->sqlstate, "HY000");
    size_t used = (size_t)snprintf(err->message, sizeof err->message, "%s", c->role);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message + used, sizeof err->message - used, fmt, ap);
    va_end(ap);
}

/* What a failed connect's message adds, for the errors whose cause is TLS
 * (or its absence) but whose text does not say so; "" otherwise. A refused
 * plaintext login over TCP may be require_secure_transport's (MariaDB
 * answers it with the same 1045 as a wrong password). */
static const char *tls_connect_hint(const db_conn_t *c, unsigned code)
{
    int over_tcp = c->socket == NULL && c->host != NULL && strcmp(c->host, "localhost") != 0;
    if (code == ER_ACCESS_DENIED_ERROR && c->tls == HG_ORDER_TLS_OFF && over_tcp) /* the socket counts as secure */
        return " (if the password is right: a server with require_secure_transport = ON refuses a login "
               "without TLS with this same error; set mysql-tls to on or verify)";
    if (code == CR_SSL_CONNECTION_ERROR && c->tls != HG_ORDER_TLS_OFF)
        return " (mysql-tls: no TLS session: the server must speak TLS 1.2+ with an ECDHE AEAD suite, and its "
               "certificate chain to mysql-tls-ca-file when one is given, and name the host for verify)";
    return "";
}

/* The refusal of a connect after db_interrupt: a client error (2002),
 * so every caller already treats it as "the server cannot be reached". */
static int refuse_interrupted(db_conn_t *c, hg_order_error_t *err)
{
    if (err != NULL) {
        err->code = CR_CONNECTION_ERROR;
        snprintf(err->sqlstate, sizeof err->sqlstate, "HY000");
        snprintf(err->message, sizeof err->message, "%sconnect: %u interrupted: the connection was cut for a stop",
                 c->role, (unsigned)CR_CONNECTION_ERROR);
    }
    return -1;
}

int db_connect(db_conn_t *c, hg_order_error_t *err)
{
    if (c->m != NULL)
        return 0;
    pthread_mutex_lock(&c->cut_lock);
    int interrupted = c->interrupted;
    pthread_mutex_unlock(&c->cut_lock);
    if (interrupted)
        return refuse_interrupted(c, err);
    MYSQL *m = mysql_init(NULL);
    if (m == NULL) /* Connector/C's allocation failed: the one policy (base/alloc.h) */
        xalloc_oom(sizeof(MYSQL));
    my_bool off = 0;
    unsigned connect_timeout = c->connect_timeout_s, read_timeout = c->read_timeout_s,
             write_timeout = c->write_timeout_s;
    mysql_options(m, MYSQL_OPT_RECONNECT, &off);
    mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &connect_timeout);
    mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &read_timeout);
    mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &write_timeout);
    mysql_options(m, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    tls_options(c, m);
    char hooked[DB_PASSWORD_MAX + 1];
    const char *password =
        password_hook != NULL && password_hook(password_hook_arg, hooked, sizeof hooked) == 1 ? hooked : c->password;
    MYSQL *connected = mysql_real_connect(m, c->host, c->user, password, c->database, c->port, c->socket, 0);
    memset(hooked, 0, sizeof hooked);
    char where[600];
    server_name(c, where, sizeof where);
    if (connected == NULL && db_tls_guard_refused(m)) { /* nothing was sent after the greeting */
        connect_refused(c, CR_SSL_CONNECTION_ERROR, err,
                        "the MariaDB server at %s does not offer TLS (mysql-tls = %s): refused before sending the "
                        "login: %u (start the server with ssl-cert and ssl-key, or set mysql-tls = off where "
                        "plaintext is acceptable)",
                        where, c->tls == HG_ORDER_TLS_VERIFY ? "verify" : "on", (unsigned)CR_SSL_CONNECTION_ERROR);
        mysql_close(m);
        db_progress(c);
        return -1;
    }
    if (connected == NULL) {
        char what[700];
        snprintf(what, sizeof what, "connect to %s",
                 c->socket != NULL ? c->socket
                 : c->host != NULL ? c->host
                                   : "localhost");
        error_from(err, c->role, what, m, NULL);
        if (err != NULL) {
            size_t used = strlen(err->message);
            snprintf(err->message + used, sizeof err->message - used, "%s", tls_connect_hint(c, err->code));
        }
        mysql_close(m);
        db_progress(c);
        return -1;
    }
    if (c->tls != HG_ORDER_TLS_OFF && mysql_get_ssl_cipher(m) == NULL) {
        /* The guard was not called (a server without CLIENT_PLUGIN_AUTH,
         * older than MySQL 5.5, ignores MYSQL_DEFAULT_AUTH): the login went
         * in plaintext; at least no statement does. */
        connect_refused(c, CR_SSL_CONNECTION_ERROR, err,
                        "connect to %s: %u the server does not speak TLS and mysql-tls is not off: the login went in "
                        "plaintext (a server without plugin authentication); refused rather than sending the orders "
                        "in plaintext",
                        where, (unsigned)CR_SSL_CONNECTION_ERROR);
        mysql_close(m);
        db_progress(c);
        return -1;
    }
    /* Publish the socket for db_interrupt, unless it ran while we connected
     * (a connect cannot be cut: mysql-connect-timeout bounds it). */
    pthread_mutex_lock(&c->cut_lock);
    interrupted = c->interrupted;
    if (!interrupted)
        c->fd = (int)mysql_get_socket(m);
    pthread_mutex_unlock(&c->cut_lock);
    if (interrupted) {
        mysql_close(m);
        return refuse_interrupted(c, err);
    }
    c->m = m;
    c->connection_id = mysql_thread_id(m);
    c->connects++;
    if (session_setup(c, err) != 0) {
        db_disconnect(c);
        return -1;
    }
    db_progress(c);
    return 0;
}

int db_query(db_conn_t *c, const char *sql, hg_order_error_t *err)
{
    if (db_connect(c, err) != 0)
        return -1;
    if (mysql_query(c->m, sql) != 0) {
        db_fail(c, sql, NULL, err);
        return -1;
    }
    MYSQL_RES *res = mysql_store_result(c->m); /* none expected; drain if any */
    if (res != NULL)
        mysql_free_result(res);
    db_progress(c);
    return 0;
}

int db_begin(db_conn_t *c, hg_order_error_t *err)
{
    return db_query(c, "START TRANSACTION", err);
}

int db_commit(db_conn_t *c, hg_order_error_t *err)
{
    if (c->m == NULL) { /* the transaction died with its connection */
        if (err != NULL) {
            err->code = CR_SERVER_LOST;
            snprintf(err->sqlstate, sizeof err->sqlstate, "HY000");
            snprintf(err->message, sizeof err->message, "%sCOMMIT: %u connection lost during the transaction", c->role,
                     (unsigned)CR_SERVER_LOST);
        }
        return -1;
    }
    if (mysql_commit(c->m) != 0) {
        /* The COMMIT was sent: a lost connection leaves its outcome unknown. A server error rolled it back. */
        if (db_fail(c, "COMMIT", NULL, err) == DB_LOST)
            c->commits_unknown++;
        return -1;
    }
    db_progress(c);
    return 0;
}

int db_rollback(db_conn_t *c)
{
    if (c->m == NULL)
        return 0;
    int rc = mysql_rollback(c->m);
    db_progress(c);
    if (rc != 0) {
        db_disconnect(c);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- statements */

static int stmt_register(db_conn_t *c, db_stmt_t *s)
{
    for (size_t i = 0; i < c->stmt_count; i++)
        if (c->stmts[i] == s)
            return 0;
    if (c->stmt_count == DB_MAX_STMTS)
        return -1;
    c->stmts[c->stmt_count++] = s;
    return 0;
}

MYSQL_STMT *db_prepare(db_conn_t *c, db_stmt_t *s, hg_order_error_t *err)
{
    if (db_connect(c, err) != 0)
        return NULL;
    if (s->st != NULL)
        return s->st;
    char what[80];
    snprintf(what, sizeof what, "%s: prepare", s->name);
    if (stmt_register(c, s) != 0) {
        if (err != NULL) {
            err->code = CR_OUT_OF_MEMORY;
            snprintf(err->sqlstate, sizeof err->sqlstate, "HY000");
            snprintf(err->message, sizeof err->message, "%s%s: %u more than %d statements on one connection", c->role,
                     what, (unsigned)CR_OUT_OF_MEMORY, DB_MAX_STMTS);
        }
        return NULL;
    }
    MYSQL_STMT *st = mysql_stmt_init(c->m);
    if (st == NULL) /* Connector/C's allocation failed: the one policy (base/alloc.h) */
        xalloc_oom(sizeof(MYSQL_STMT));
    if (mysql_stmt_prepare(st, s->sql, (unsigned long)strlen(s->sql)) != 0) {
        db_fail(c, what, st, err);
        mysql_stmt_close(st);
        return NULL;
    }
    if (s->params != 0 && mysql_stmt_param_count(st) != (unsigned long)s->params) {
        /* The caller's lexer and the server disagree (a construct it does not know). */
        if (err != NULL) {
            err->code = ER_WRONG_ARGUMENTS;
            snprintf(err->sqlstate, sizeof err->sqlstate, "HY000");
            snprintf(err->message, sizeof err->message,
                     "%s%s: the server counts %lu placeholders, the configuration check %u", c->role, s->name,
                     mysql_stmt_param_count(st), s->params);
        }
        mysql_stmt_close(st);
        return NULL;
    }
    s->st = st;
    db_progress(c);
    return st;
}

MYSQL_STMT *db_exec(db_conn_t *c, db_stmt_t *s, MYSQL_BIND *params, size_t n, MYSQL_BIND *result, hg_order_error_t *err)
{
    MYSQL_STMT *st = db_prepare(c, s, err);
    if (st == NULL)
        return NULL;
    if ((n > 0 && mysql_stmt_bind_param(st, params) != 0) || mysql_stmt_execute(st) != 0) {
        db_fail(c, s->name, st, err);
        return NULL;
    }
    if (result != NULL && (mysql_stmt_bind_result(st, result) != 0 || mysql_stmt_store_result(st) != 0)) {
        db_fail(c, s->name, st, err);
        if (c->m != NULL)
            mysql_stmt_free_result(st);
        return NULL;
    }
    db_progress(c);
    return st;
}

int db_fetch_end(db_conn_t *c, const db_stmt_t *s, MYSQL_STMT *st, int rc, hg_order_error_t *err)
{
    if (rc == 1) {
        char what[64];
        snprintf(what, sizeof what, "%s: fetch", s->name);
        db_fail(c, what, st, err);
        if (c->m != NULL)
            mysql_stmt_free_result(st);
        return -1;
    }
    mysql_stmt_free_result(st);
    return 0;
}

/* ---------------------------------------------------------------- values */

void db_bind_u64(MYSQL_BIND *b, uint64_t *v)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_unsigned = 1;
}

void db_bind_i64(MYSQL_BIND *b, int64_t *v)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
}

void db_bind_i64_null(MYSQL_BIND *b, int64_t *v, my_bool *is_null)
{
    db_bind_i64(b, v);
    b->is_null = is_null;
}

void db_bind_time(MYSQL_BIND *b, MYSQL_TIME *v)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_DATETIME;
    b->buffer = v;
    b->buffer_length = sizeof *v;
}

void db_bind_str(MYSQL_BIND *b, const char *s, unsigned long *len)
{
    memset(b, 0, sizeof *b);
    if (s == NULL) {
        b->buffer_type = MYSQL_TYPE_NULL;
        return;
    }
    *len = (unsigned long)strlen(s);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = (void *)s;
    b->buffer_length = *len;
    b->length = len;
}

const char *db_time_format(const MYSQL_TIME *t, char *buf, size_t len)
{
    snprintf(buf, len, "%04u-%02u-%02u %02u:%02u:%02u.%06lu", t->year, t->month, t->day, t->hour, t->minute, t->second,
             t->second_part);
    return buf;
}
