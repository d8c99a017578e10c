/*
 * include/hourglass/order.h — the idempotent order cancel on MySQL/MariaDB.
 *
 * Part of libhourglass (DESIGN.md §5, §8). An order left unpaid past its
 * timeout is cancelled and its stock released — exactly once, and never an
 * order that was paid. The whole guarantee is one SQL transaction:
 *
 *   claim         UPDATE orders SET status='cancelled', … WHERE id=? AND status='pending'
 *   if 1 row:     side effects (return stock, mark the outbox row done), COMMIT
 *   if 0 rows:    ROLLBACK; the order was paid or cancelled already (or never existed)
 *
 * The payment path claims with the same WHERE status='pending' (hg_order_pay),
 * so of a payment and any number of duplicate cancels exactly one wins, and a
 * duplicate cancel message changes nothing. Because the claim is idempotent,
 * every failure can be retried: when a COMMIT's outcome is unknown (the
 * connection died), the retry either does the work or finds the order no
 * longer pending.
 *
 * Threads: one hg_order_db per thread (it owns one MYSQL connection and its
 * prepared statements); a handle may move between threads but must never be
 * used by two at once — except hg_order_db_interrupt, which another thread
 * calls to cut a handle in use. Everything else here is thread-safe. The first
 * hg_order_db_open runs mysql_library_init exactly once (pthread_once); a
 * program may call hg_order_library_init first, from its main thread, to get
 * that over with before it starts threads.
 *
 * Errors (CONTRIBUTING.md): functions return 0 / -1 (or a pointer / NULL) —
 * except hg_order_timeout_send, a broker call that returns an hg_err_t like
 * every client call of <hourglass/hourglass.h>; on failure
 * an hg_order_error_t, when the caller passes one, holds the server's or the
 * client's error number and a message naming the cause (which statement,
 * which field, the server's own text). Messages never end with a newline.
 * A NULL handle never crashes: the call fails with "no database handle"
 * (code 0; HG_ORDER_PERMANENT where it reports an outcome); the close,
 * interrupt, rollback and init-like calls ignore it.
 */
#ifndef HOURGLASS_ORDER_H
#define HOURGLASS_ORDER_H

#include <stddef.h>
#include <stdint.h>

/* hg_err_t and hg_client_t, for hg_order_timeout_send (a client call). */
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ outcomes */

/* What one cancel or payment attempt came to. */
typedef enum hg_order_outcome {
    HG_ORDER_CANCELLED = 0, /* this call cancelled the order: claim + side effects committed */
    HG_ORDER_PAID,          /* this call paid the order (hg_order_pay only) */
    HG_ORDER_NOT_PENDING,   /* the order exists but is no longer pending: nothing changed */
    HG_ORDER_NOT_FOUND,     /* no such order: nothing changed */
    HG_ORDER_TRANSIENT,     /* failed, nothing committed or outcome unknown: retry later (safe) */
    HG_ORDER_PERMANENT,     /* failed in a way a retry will not fix (bad SQL, constraint, bad id) */
    HG_ORDER_LOCKED         /* batch cancel only: another transaction holds the order's row, so it was
                               skipped (FOR UPDATE SKIP LOCKED); nothing changed, retry later */
} hg_order_outcome_t;

/* A static lower-case name: "cancelled", "paid", "not-pending", "not-found",
 * "transient", "permanent", "locked"; "unknown" for a value outside the enum. */
const char *hg_order_outcome_name(hg_order_outcome_t outcome);

/* The error of a failed call. code is the MySQL/MariaDB error number (server
 * 1000-1999 and 3000+, client 2000-2999) or 0 when the failure is ours (a bad
 * parameter, a claim that changed several rows, an invalid SQL setting). */
typedef struct hg_order_error {
    unsigned code;
    char sqlstate[6];  /* "HY000" etc.; "" when code is 0 */
    char message[512]; /* "claim-sql: 1205 Lock wait timeout exceeded; …" */
} hg_order_error_t;

/* Classify a MySQL/MariaDB error number for a retry decision. Returns
 * HG_ORDER_TRANSIENT for errors that are about the moment, not the message —
 *   1213 deadlock (the server rolled the transaction back),
 *   1205 lock wait timeout (only the statement was rolled back: the library
 *        rolls back the rest itself),
 *   1317 query interrupted (KILL QUERY), 1969 max_statement_time exceeded,
 *   1927 connection killed, 4031 disconnected by the server for inactivity
 *        (MariaDB 10.11 numbering; older client headers give 4031 another name),
 *   1040 too many connections, 1053 server shutdown, 1290 read-only server
 *        (a demoted primary after a fail-over: the connection is closed, so
 *        the next call reaches the new one), 1615 statement needs re-preparing,
 *   the set-up errors of hg_order_setup_hint (1044, 1045, 1049, 1142, 1143,
 *        1146: a GRANT revoked, a table renamed — not the order's fault),
 *   and every client error 2000-2999 (2006 gone away, 2013 lost during a
 *        query, 2002/2003 cannot connect, 2055 lost …: the outcome of a COMMIT
 *        in flight is unknown, the retry is safe because the claim is idempotent)
 * — and HG_ORDER_PERMANENT for everything else (syntax errors, unknown
 * columns, constraint violations …). Thread-safe. */
hg_order_outcome_t hg_order_classify(unsigned code);

/* For an error that waiting will not heal because the set-up is wrong —
 * 1045 access denied (user or password), 1044 no rights on the database,
 * 1049 no such database, 1142/1143 a missing GRANT, 1146 no such table,
 * 2059 the client side of the account's authentication plugin (ed25519,
 * PAM's dialog …) cannot be loaded —
 * a static string saying the fix in terms of the mysql-* config keys; NULL
 * for any other code. A daemon stops at start-up on such an error and
 * reports it as unhealthy at run time. Thread-safe. */
const char *hg_order_setup_hint(unsigned code);

/* 1 when an error with code says MariaDB itself is failing, not one order:
 * every client error 2000-2999 (cannot connect, gone away, lost), a
 * connection killed or timed out (1927, 4031), a shutdown (1053), a
 * read-only server (1290), too many connections (1040), or a set-up error
 * (hg_order_setup_hint). 0 for code 0: a failure the library found itself
 * without a server error — a claim that changed more than one row, no
 * handle — is about the data or the caller, not the database. What a
 * daemon's /healthz reports. Thread-safe. */
int hg_order_error_is_database(unsigned code);

/* ------------------------------------------------------------------ the SQL */

/* The statements of a cancel, all configurable so that a shop with another
 * schema configures rather than codes (hourglass-consumer's claim-sql,
 * side-effect-sql and lookup-sql keys). Placeholders, counted outside quoted
 * strings, quoted identifiers and comments:
 *   ?        the order id (BIGINT UNSIGNED): exactly one in every statement
 *   :reason  the cancel reason (a string, NULL when the caller gives none):
 *            any number in the claim and the side effects, none in the lookup
 * Any other :name is refused (":=" assignment is fine). One statement per
 * field; a trailing ';' is allowed and dropped.
 *
 *   claim         must change exactly one row when it wins and none when the
 *                 order is not pending (its WHERE carries status='pending');
 *                 a claim that changes more rows is rolled back (PERMANENT)
 *   side_effects  run in order in the claim's transaction when it won
 *   lookup        a query that returns at least one row when the order
 *                 exists; run only when the claim changed nothing, to tell
 *                 NOT_PENDING from NOT_FOUND
 *
 * The strings belong to the caller; hg_order_db_open copies them. */
#define HG_ORDER_SQL_MAX_SIDE_EFFECTS 8
#define HG_ORDER_SQL_MAX_LEN          4096 /* bytes per statement */

typedef struct hg_order_sql {
    const char *claim;
    const char *side_effects[HG_ORDER_SQL_MAX_SIDE_EFFECTS];
    size_t side_effect_count;
    const char *lookup;
} hg_order_sql_t;

/* The reference schema's statements (sql/schema.sql):
 *   claim:  UPDATE orders SET status='cancelled', cancelled_at=NOW(6), cancel_reason=:reason
 *           WHERE id=? AND status='pending'
 *   side 1: UPDATE stock s JOIN order_items i ON i.sku_id = s.sku_id
 *           SET s.available = s.available + i.qty, s.reserved = s.reserved - i.qty
 *           WHERE i.order_id = ?
 *   side 2: UPDATE order_timeout_msg SET status='done' WHERE order_id = ?
 *   lookup: SELECT status FROM orders WHERE id = ?
 * The pointers are to static strings. Thread-safe. */
void hg_order_sql_default(hg_order_sql_t *sql);

/* Check one statement for the field named field ("claim-sql",
 * "side-effect-sql", "lookup-sql"; the name decides whether :reason is
 * allowed — only lookup-sql refuses it). Returns 0, or -1 with a message that
 * starts with the field name, e.g.
 *   claim-sql: expected exactly one '?' (the order id), found 2
 * Fails on NULL or empty text, more than HG_ORDER_SQL_MAX_LEN bytes, an
 * unterminated quote or comment, a second statement, the wrong number of '?',
 * :reason in the lookup, or an unknown :name. Thread-safe. */
int hg_order_sql_check(const char *field, const char *text, char *err, size_t errlen);

/* Check every statement of sql (hg_order_sql_check on each, side effects named
 * "side-effect-sql[1]" …), plus: at most HG_ORDER_SQL_MAX_SIDE_EFFECTS side
 * effects. Zero side effects are allowed (a claim that does everything).
 * Returns 0 / -1 with the first problem in err. Thread-safe. */
int hg_order_sql_validate(const hg_order_sql_t *sql, char *err, size_t errlen);

/* ------------------------------------------------------------------ the handle */

typedef struct hg_order_db hg_order_db;

/* hg_order_db_params_t.tls: TLS on the connection to MariaDB. Whenever it is
 * not off: TLS 1.2 or 1.3 only, TLS 1.2 with the forward-secret AEAD suites
 * only (ECDHE with AES-GCM or ChaCha20-Poly1305), and a server that does not
 * speak TLS, or offers nothing else, is refused (2026) — never a plaintext
 * fallback. */
typedef enum hg_order_tls {
    HG_ORDER_TLS_OFF = 0, /* plaintext (a server with require_secure_transport = ON refuses the login: 1045) */
    HG_ORDER_TLS_ON,      /* encrypted; the server's certificate is checked against tls_ca_file when one is
                             given, its name is not. A server without TLS is refused once connected: its
                             login exchange (never the password itself) has crossed in the clear */
    HG_ORDER_TLS_VERIFY   /* encrypted, the certificate must chain to tls_ca_file (required) and carry the
                             host's name (host, or localhost for the socket); a server without TLS is refused
                             before the login. Over the unix socket both modes mean the same as over TCP:
                             MariaDB speaks TLS there too */
} hg_order_tls_t;

/* Where and how to connect. Strings belong to the caller (copied by open).
 * Unset (NULL / 0) fields take the defaults in brackets. */
typedef struct hg_order_db_params {
    const char *host;                    /* [NULL: localhost, i.e. the socket when one is given] */
    const char *socket;                  /* unix socket path [NULL: the client's default] */
    unsigned port;                       /* [0: 3306] */
    const char *user;                    /* [NULL: the current user] */
    const char *password;                /* [NULL: none] */
    const char *database;                /* [NULL: none — then only schema helpers that name tables work] */
    unsigned connect_timeout_s;          /* [5] */
    unsigned read_timeout_s;             /* [60]; keep it above innodb_lock_wait_timeout */
    unsigned write_timeout_s;            /* [60] */
    unsigned lock_wait_timeout_s;        /* [0: server default] else SET SESSION innodb_lock_wait_timeout */
    const hg_order_sql_t *sql;           /* [NULL: hg_order_sql_default] */
    unsigned idle_transaction_timeout_s; /* [0: server default] else SET SESSION idle_transaction_timeout:
                                            the server rolls back a transaction left idle this long and
                                            closes the connection (a process frozen between its claim
                                            and its COMMIT loses its locks); leave 0 on a handle that
                                            carries the caller's own transactions (hg_order_db_mysql) */
    hg_order_tls_t tls;                  /* [HG_ORDER_TLS_OFF] see hg_order_tls_t */
    const char *tls_ca_file;             /* [NULL] PEM CA file the server's certificate must chain to */
    const char *tls_cert_file;           /* [NULL] PEM client certificate (with tls_key_file), for a user
                                            created REQUIRE X509 / SUBJECT / ISSUER */
    const char *tls_key_file;            /* [NULL] its PEM private key, unencrypted */
} hg_order_db_params_t;

/* Run mysql_library_init once for the process (pthread_once). Returns 0, or
 * -1 if the client library cannot initialise. Optional: open calls it. */
int hg_order_library_init(void);

/* Open a handle: validate params->sql (error names the field) and the tls
 * fields (a tls value out of range, HG_ORDER_TLS_VERIFY without tls_ca_file,
 * only one of tls_cert_file and tls_key_file, a tls_*_file with tls off, a
 * file that cannot be read or that OpenSSL cannot read as PEM of its kind
 * (each CA of a bundle; DER is named as such), an encrypted key, a key that
 * is not tls_cert_file's: the error names the field and the file), connect with MYSQL_OPT_RECONNECT off, utf8mb4, autocommit off, the
 * TLS asked for, the timeouts above.
 * Statements are prepared on first use, so a handle can be opened before the
 * schema exists (see hg_order_db_prepare to check them up front). Returns the
 * handle, or NULL with err filled (err->code is the client/server error of a
 * failed connect, 0 for a bad parameter). Free with hg_order_db_close. */
hg_order_db *hg_order_db_open(const hg_order_db_params_t *params, hg_order_error_t *err);

/* Close the connection and free the handle. NULL is fine. A transaction
 * left open is rolled back first; an idle handle costs no round trip, so
 * closing it never waits on a server that stopped answering. */
void hg_order_db_close(hg_order_db *db);

/* Cut the handle's connection for a stop, from any thread, while another
 * thread may be inside a call on it: its socket is shut down (shutdown(2)),
 * so a call blocked on a hung server (SIGSTOPped, a network black hole)
 * returns at once instead of after read_timeout_s — a cancel as
 * HG_ORDER_TRANSIENT (2013, its transaction rolled back by the server when
 * the connection dies, or its COMMIT's outcome unknown: the retry is safe) —
 * and every later call fails at once without connecting (2002 "interrupted").
 * For good: open a new handle to work again. A connect in progress is not
 * cut (connect_timeout_s bounds it). The caller keeps the handle alive (no
 * hg_order_db_close) until this returns. NULL is fine. Thread-safe: the one
 * call that may overlap another call on the same handle. */
void hg_order_db_interrupt(hg_order_db *db);

/* Progress for a watchdog: from now on fn(arg) is called on the thread
 * using db each time one of its round trips to the server returns, whatever
 * the answer — a statement (a row, an error, a lock wait timeout, a
 * deadlock), a COMMIT or ROLLBACK, a reconnect made or refused. A program
 * that reports a thread stuck on MariaDB (a /healthz check) restarts its
 * clock there, so only one round trip that does not return counts: a batch
 * cancel split down to single orders under lock contention waits on locks
 * many times inside one call, each wait bounded by the lock wait timeout,
 * while a frozen server answers nothing. fn must be quick and must not use
 * db. NULL fn: none. NULL db is fine. Call it from the thread that uses db. */
void hg_order_db_set_progress(hg_order_db *db, void (*fn)(void *arg), void *arg);

/* Prepare every statement now (connecting first if needed): a start-up check
 * that the configured SQL matches the database. Returns 0, or -1 with err
 * naming the field whose statement the server refused, e.g.
 *   claim-sql: prepare: 1146 Table 'shop.orders' doesn't exist */
int hg_order_db_prepare(hg_order_db *db, hg_order_error_t *err);

/* The server's id of the current connection (CONNECTION_ID()), 0 when the
 * handle is disconnected (after a connection error, until the next call
 * reconnects). Tests use it to KILL the worker's connection. */
unsigned long hg_order_db_connection_id(const hg_order_db *db);

/* How many times the handle (re)connected since open, the first one included. */
uint64_t hg_order_db_connects(const hg_order_db *db);

/* How many COMMITs on this handle, since open, failed with the connection
 * lost while the COMMIT was in flight (2013, a KILL CONNECTION …): their
 * outcome is unknown, the transaction may have landed. A cancel (or a
 * batch's transaction) that ends so is HG_ORDER_TRANSIENT and its retry
 * answers NOT_PENDING if it did land: a caller that counts its cancels adds
 * this to bound them from above. A failure before the COMMIT was sent, or
 * a COMMIT the server refused (rolled back), is not counted. 0 for NULL. */
uint64_t hg_order_db_commits_unknown(const hg_order_db *db);

/* ------------------------------------------------------------------ cancel and pay */

/* Cancel order_id if it is still pending, in one transaction (see the top of
 * this file). reason (may be NULL; at most 64 bytes with the reference schema)
 * is bound to :reason — the callers use "timeout-message", "outbox-overdue",
 * "inspection", "manual". A handle whose connection died reconnects and
 * re-prepares here first.
 *
 * Returns 0 when the attempt reached a definite outcome — *outcome is
 * HG_ORDER_CANCELLED, HG_ORDER_NOT_PENDING or HG_ORDER_NOT_FOUND — and -1
 * when it failed: *outcome is HG_ORDER_TRANSIENT (see hg_order_classify; the
 * transaction was rolled back or its commit outcome is unknown; call again,
 * preferably after a backoff — a failure to reconnect is always transient,
 * whatever its code, because it is not the order's fault) or
 * HG_ORDER_PERMANENT (err says why; the
 * transaction was rolled back). err may be NULL. After a transient failure
 * whose commit outcome was unknown, the retry may answer NOT_PENDING for an
 * order the first attempt did cancel. */
int hg_order_cancel(hg_order_db *db, uint64_t order_id, const char *reason, hg_order_outcome_t *outcome,
                    hg_order_error_t *err);

/* ------------------------------------------------------------------ batch cancel
 * Many orders in one transaction, one COMMIT (docs/order-cancel.md, "Batched
 * cancels"). Each order is still claimed on its own row and gets its side
 * effects only when its claim won; one that fails never fails the others.
 *
 * The reference schema's statements (the handle's SQL equal to
 * hg_order_sql_default) run set-based, a fixed number of statements for the
 * whole batch:
 *   claim read   SELECT id, status FROM orders WHERE id IN (…)
 *                FOR UPDATE SKIP LOCKED
 *                a pending row returned is claimed (locked by us, nobody can
 *                pay it now); a row another transaction holds is skipped —
 *                never waited for — and reported HG_ORDER_LOCKED; a row not
 *                there at all (a plain read tells) HG_ORDER_NOT_FOUND
 *   claim        UPDATE orders SET status='cancelled', … WHERE id IN (claimed)
 *                AND status='pending' (must change every claimed row)
 *   stock        one UPDATE of stock for all the claimed orders' SKUs, the
 *                quantities summed per SKU, rows locked in SKU order (ORDER BY
 *                sku_id on the primary key): two batches never deadlock each
 *                other on stock
 *   outbox       UPDATE order_timeout_msg SET status='done' WHERE order_id IN (claimed)
 *   COMMIT
 * Configured (custom) statements run per order, in ascending order id, in
 * one transaction: the claim with that order's id; when it changed one row,
 * the side effects; when it changed none, the lookup; then one COMMIT. A
 * custom claim cannot skip a locked row: it waits up to the session's lock
 * wait (params.lock_wait_timeout_s) and fails with 1205, so keep that wait
 * short (a few seconds) on a handle that cancels in batches.
 *
 * Failure isolation: when the transaction fails (deadlock, lock wait
 * timeout, a constraint, a lost connection), it is rolled back and the
 * batch is retried in two halves, each half the same way, down to single
 * orders; only an order that fails on its own gets HG_ORDER_TRANSIENT or
 * HG_ORDER_PERMANENT with its error. When the server cannot be reached at
 * all, every order of the (sub)batch is TRANSIENT at once. Duplicate ids in
 * one batch are fine: the first is cancelled, the others answer
 * HG_ORDER_NOT_PENDING, as a duplicate message would. */

/* One order of a batch: order_id is the input, the rest is filled. */
typedef struct hg_order_batch_item {
    uint64_t order_id;
    hg_order_outcome_t outcome; /* CANCELLED, NOT_PENDING, NOT_FOUND, LOCKED, TRANSIENT or PERMANENT */
    hg_order_error_t error;     /* TRANSIENT / PERMANENT: why; code 0 and "" otherwise */
} hg_order_batch_item_t;

/* What a batch call did, added to by each call (zero it once). */
typedef struct hg_order_batch_stats {
    uint64_t transactions; /* transactions attempted (the batch, then its halves …) */
    uint64_t committed;    /* of them, committed */
    uint64_t splits;       /* failed transactions retried as two halves */
    uint64_t locked;       /* orders skipped because another transaction held them */
} hg_order_batch_stats_t;

/* The most orders one call takes. */
#define HG_ORDER_BATCH_MAX 1000

/* Cancel items[0..n) (1 <= n <= HG_ORDER_BATCH_MAX) as described above, with
 * reason bound to :reason (NULL: none). Order id 0 is PERMANENT without SQL.
 * stats may be NULL. Returns the number of items whose outcome is not
 * definite (LOCKED, TRANSIENT, PERMANENT: 0 when every order was cancelled
 * or found not pending / absent), or -1 for a NULL handle, NULL items or n
 * out of range (nothing done). Never leaves a transaction open. */
int hg_order_cancel_batch(hg_order_db *db, hg_order_batch_item_t *items, size_t n, const char *reason,
                          hg_order_batch_stats_t *stats);

/* The payment path's claim on the reference schema, in one transaction:
 *   UPDATE orders SET status='paid', paid_at=NOW(6) WHERE id=? AND status='pending'
 *   if 1 row: stock reserved → sold for each order_items row; outbox row done
 * Returns like hg_order_cancel: 0 with HG_ORDER_PAID, HG_ORDER_NOT_PENDING
 * (already paid, or cancelled — a real shop refunds) or HG_ORDER_NOT_FOUND;
 * -1 with HG_ORDER_TRANSIENT or HG_ORDER_PERMANENT. Not configurable: a shop
 * with another schema has its own payment code and only needs its claim to
 * say WHERE status='pending' too. */
int hg_order_pay(hg_order_db *db, uint64_t order_id, hg_order_outcome_t *outcome, hg_order_error_t *err);

/* hg_order_pay, then — only when this call paid the order and client is not
 * NULL — REVOKE topic KEY <order_id> on the broker, so the paid order's
 * timeout message never reaches the consumer (topic NULL means
 * HG_ORDER_TIMEOUT_TOPIC). The revoke is best effort: the payment is
 * committed before it, and a revoke that fails or finds the message already
 * delivered is harmless (the cancel's claim finds the order paid and changes
 * nothing). *revoked (may be NULL) gets the messages revoked, or -1 when the
 * revoke failed (hg_client_errmsg(client) says why) or was not tried (not
 * paid by this call, no client). outcome and err may be NULL, as for
 * hg_order_pay. Returns exactly what hg_order_pay returns. */
struct hg_client; /* hg_client_t of <hourglass/hourglass.h> */
int hg_order_pay_revoke(hg_order_db *db, struct hg_client *client, const char *topic, uint64_t order_id,
                        hg_order_outcome_t *outcome, long *revoked, hg_order_error_t *err);

/* Parse a message payload as an order id: canonical decimal, 1 to
 * 18446744073709551615, no sign, blanks, leading zeros or trailing bytes
 * (len bytes from text; text need not be NUL-terminated). Returns 0, or -1
 * with the reason in err, e.g. "payload is not an order id: byte 3 is 'x'". */
int hg_order_parse_id(const char *text, size_t len, uint64_t *id, char *err, size_t errlen);

/* ------------------------------------------------------------------ the reference schema
 * The tables the default statements and hg_order_pay are written for
 * (sql/schema.sql, compiled in: the file itself is not installed). */

/* The text of sql/schema.sql (a static string). */
const char *hg_order_schema_sql(void);

/* Run every statement of the reference schema (CREATE TABLE IF NOT EXISTS) in
 * the handle's database. Returns 0 / -1 with err naming the statement. */
int hg_order_schema_create(hg_order_db *db, hg_order_error_t *err);

/* ------------------------------------------------------------------ the order service's half
 * What every order service writes around Hourglass, done once (DESIGN.md §7,
 * docs/order-service.md). An order's timeout is born in the order's own
 * transaction and sent after it commits:
 *
 *   m = hg_order_db_mysql(db, &err)           the handle's connection
 *   INSERT the order, its items, reserve stock   the caller's statements, on m
 *   hg_order_timeout_create(db, id, expire_at_ms, relay_after_ms, &err)
 *                                              the outbox row, status 'new'
 *   hg_order_db_commit(db, &err)               all of it or none
 *   hg_order_timeout_publish(db, client, topic, id, expire_at_ms, …)
 *                                              SEND topic <id> KEY <id> DELAY <remaining>,
 *                                              then UPDATE … SET status='sent'
 *                                              WHERE order_id=? AND status='new'
 *
 * Each failure is covered by a layer that already exists:
 *   the send fails             the row stays 'new': the compensator's relay
 *                              sends it from next_attempt_at with the delay
 *                              that remains
 *   the service dies between   the same: the row committed with the order, the
 *   COMMIT and SEND            relay sends it
 *   a payment (or a cancel)    hg_order_pay marked the row 'done'; the guard
 *   lands between COMMIT and   AND status='new' keeps it 'done' (an unguarded
 *   "mark sent"                UPDATE would reopen it, and the overdue layer
 *                              would read it again)
 *   mark sent fails            the relay sends the row again: a duplicate
 *                              message, which the idempotent cancel ignores
 *   a payment after the cancel hg_order_pay answers HG_ORDER_NOT_PENDING for an
 *                              order that is 'cancelled': the shop owes a refund
 * The message: payload and KEY are the order id in decimal, as the relay sends
 * it and as hourglass-consumer reads it.
 *
 * Between hg_order_db_mysql and hg_order_db_commit / hg_order_db_rollback the
 * handle carries the caller's open transaction: call nothing else on it in
 * between (hg_order_cancel and hg_order_pay would commit the caller's work).
 * Thread rules as for every handle: one thread at a time. */

struct hg_client; /* hg_client_t of <hourglass/hourglass.h> */
struct st_mysql;  /* MYSQL of <mysql.h> (MariaDB Connector/C) */

/* The topic the sample configurations use (hourglass-consumer's topic,
 * hourglass-compensator's topic): the default of hg_order_timeout_send. */
#define HG_ORDER_TIMEOUT_TOPIC "order-timeout"

/* The relay leaves a new outbox row alone this long (relay_after_ms 0), so
 * that it does not send what the fast path is sending (DESIGN.md §7). */
#define HG_ORDER_RELAY_AFTER_DEFAULT_MS 10000

/* The handle's MariaDB connection (a MYSQL *), connecting first when it has
 * none, for the caller's own statements in the transaction that creates an
 * order. Autocommit is off: the first statement opens the transaction. The
 * pointer is valid until the next hg_order_* call on the handle; end the
 * transaction with hg_order_db_commit or hg_order_db_rollback (never
 * mysql_commit / mysql_close directly: the handle must learn of a lost
 * connection). Returns NULL with err filled (err->code: the client error)
 * when it cannot connect. */
struct st_mysql *hg_order_db_mysql(hg_order_db *db, hg_order_error_t *err);

/* COMMIT the handle's open transaction. Returns 0, or -1 with err filled
 * ("commit: 2013 Lost connection …"); after a failure the handle is
 * disconnected (the next call reconnects) and, when err->code is a client
 * error (2000-2999, hg_order_classify says TRANSIENT), the outcome is
 * unknown: the order may or may not exist — look it up before creating it
 * again. A handle with no connection fails with CR_SERVER_GONE_ERROR (2006):
 * nothing was committed. */
int hg_order_db_commit(hg_order_db *db, hg_order_error_t *err);

/* ROLLBACK the handle's open transaction (nothing when disconnected); a
 * connection that cannot roll back is closed. Never fails. NULL is fine. */
void hg_order_db_rollback(hg_order_db *db);

/* Insert order_id's outbox row (order_timeout_msg: status 'new', attempts 0,
 * expire_at = FROM_UNIXTIME(expire_at_ms / 1000) in the session time zone —
 * write the order's own expire_at the same way —, next_attempt_at =
 * LEAST(NOW(6) + relay_after_ms, expire_at); relay_after_ms 0 means
 * HG_ORDER_RELAY_AFTER_DEFAULT_MS) in the handle's open transaction, without
 * committing. Returns 0, or -1 with err filled (an existing row is 1062
 * duplicate entry, PERMANENT); then roll back with hg_order_db_rollback.
 * Fails without SQL for order_id 0 or expire_at_ms 0 (code 0). */
int hg_order_timeout_create(hg_order_db *db, uint64_t order_id, uint64_t expire_at_ms, uint32_t relay_after_ms,
                            hg_order_error_t *err);

/* The fast-path SEND of order_id's timeout, after the COMMIT: SEND topic <id>
 * KEY <id> DEDUP DELAY <expire_at_ms - now> (no delay once expire_at_ms has
 * passed; due at that millisecond, never early), through hg_send_dedup: a
 * resend, or the relay racing it, never puts a second timeout message of the
 * order in flight on hourglass:// (on amqp:// nothing is deduplicated; the
 * cancel's idempotence makes a second one harmless). topic NULL means
 * HG_ORDER_TIMEOUT_TOPIC; id_out NULL or HG_ID_MAX bytes for the message id.
 * Returns an hg_err_t: HG_OK, or the code of hg_send with the cause in
 * hg_client_errmsg(client) (HG_ERR_ARG without a message when client is
 * NULL; HG_ERR_ARG for order_id 0, whose payload no consumer takes).
 * Does not touch the database. */
hg_err_t hg_order_timeout_send(hg_client_t *client, const char *topic, uint64_t order_id, uint64_t expire_at_ms,
                               char *id_out);

/* "Mark sent", in a transaction of its own (call it with no transaction
 * open): UPDATE order_timeout_msg SET status='sent', attempts=attempts+1,
 * last_error=NULL WHERE order_id=? AND status='new', COMMIT. *marked
 * (may be NULL) is 1 when the row was 'new', 0 when the guard kept it — it
 * is 'done' (the order was paid or cancelled meanwhile), 'sent' (the relay
 * got there first) or gone. Returns 0, or -1 with err filled (the handle
 * rolled back or disconnected; the row stays 'new' and the relay sends it
 * again, a harmless duplicate). */
int hg_order_timeout_mark_sent(hg_order_db *db, uint64_t order_id, int *marked, hg_order_error_t *err);

/* What hg_order_timeout_publish came to. Every outcome leaves the order
 * covered; only SENT and SENT_KEPT mean no further message will be sent. */
typedef enum hg_order_publish_outcome {
    HG_ORDER_PUBLISH_SENT = 0,    /* sent, the row marked 'sent' */
    HG_ORDER_PUBLISH_SENT_KEPT,   /* sent; the row was no longer 'new' (paid, cancelled or relayed
                                     meanwhile) and the guard left it as it was */
    HG_ORDER_PUBLISH_SEND_FAILED, /* not sent: the row stays 'new', the relay sends it */
    HG_ORDER_PUBLISH_MARK_FAILED  /* sent, but "mark sent" failed: the relay sends it again */
} hg_order_publish_outcome_t;

/* A static lower-case name: "sent", "sent-kept", "send-failed",
 * "mark-failed"; "unknown" outside the enum. */
const char *hg_order_publish_outcome_name(hg_order_publish_outcome_t outcome);

/* The fast path after the COMMIT: hg_order_timeout_send, then, when it was
 * sent, hg_order_timeout_mark_sent. Never fails as such: returns the outcome;
 * for SEND_FAILED and MARK_FAILED error (may be NULL; errlen bytes) gets the
 * cause ("send: cannot connect to 127.0.0.1:7379: Connection refused",
 * "mark sent: …", "send: the client is NULL"), and id_out (NULL or
 * HG_ID_MAX bytes) the message id when it was sent ("" otherwise). */
hg_order_publish_outcome_t hg_order_timeout_publish(hg_order_db *db, struct hg_client *client, const char *topic,
                                                    uint64_t order_id, uint64_t expire_at_ms, char *id_out, char *error,
                                                    size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
