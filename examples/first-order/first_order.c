/*
 * examples/first-order/first_order.c — one order, its timeout, and its
 * cancel: the smallest complete client of Hourglass (docs/getting-started.md).
 *
 * It creates one order (one unit of SKU 1, reserved from stock) and its
 * outbox row in one transaction, sends the timeout after the COMMIT
 * (hg_order_timeout_publish), and then watches the order until
 * hourglass-consumer has cancelled it — printing how late the cancel came
 * after the expiry. Needs the reference schema (sql/schema.sql) with a stock
 * row for SKU 1, hourglass-broker and hourglass-consumer running.
 *
 *   cc first_order.c $(pkg-config --cflags --libs hourglass libmariadb) -o first-order
 *   HG_MYSQL_PASSWORD=… ./first-order --mysql-socket /run/mysqld/mysqld.sock \
 *       --mysql-user hg_shop --mysql-database shop [--uri hourglass://127.0.0.1:7379] [--timeout-ms 3000]
 *
 * Other options: --wait S (seconds to watch, 30), --order-id N; --help prints them.
 * Exit status 0 when the order was cancelled (not before its expiry) within
 * --wait seconds, 1 otherwise, 2 on a usage error. One thread.
 */
#include <hourglass/hourglass.h>

#include <mysql.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Run one statement in the handle's transaction; 0, or -1 with the error printed. */
static int run(MYSQL *m, const char *sql)
{
    if (mysql_query(m, sql) == 0) {
        mysql_free_result(mysql_store_result(m));
        return 0;
    }
    fprintf(stderr, "first-order: %s: %s\n", sql, mysql_error(m));
    return -1;
}

static const char usage[] =
    "usage: HG_MYSQL_PASSWORD=... first-order --mysql-socket PATH --mysql-user USER [--mysql-database shop]\n"
    "           [--uri hourglass://127.0.0.1:7379] [--timeout-ms 3000] [--wait 30] [--order-id N]\n"
    "One order, its timeout message, and its cancel by hourglass-consumer (docs/getting-started.md step 4).\n";

/* A whole number from min to max in *out; 0, or -1 with the option, the value and the range printed. */
static int parse_number(const char *name, const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end = NULL;
    unsigned long long n = 0;
    errno = 0;
    if (v[0] >= '0' && v[0] <= '9')
        n = strtoull(v, &end, 10);
    if (end == NULL || *end != '\0' || errno != 0 || n < min || n > max) {
        fprintf(stderr, "first-order: %s wants a whole number from %" PRIu64 " to %" PRIu64 ", not '%s'\n", name, min,
                max, v);
        return -1;
    }
    *out = n;
    return 0;
}

int main(int argc, char **argv)
{
    const char *uri = "hourglass://127.0.0.1:7379", *socket = NULL, *user = NULL, *database = "shop";
    uint64_t timeout_ms = 3000, order_id = 0, wait_arg = 30;
    int wait_s = 30;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--uri") == 0)
            uri = v;
        else if (strcmp(k, "--mysql-socket") == 0)
            socket = v;
        else if (strcmp(k, "--mysql-user") == 0)
            user = v;
        else if (strcmp(k, "--mysql-database") == 0)
            database = v;
        else if (strcmp(k, "--timeout-ms") == 0) {
            if (parse_number(k, v, 1, 86400000, &timeout_ms) != 0)
                return 2;
        } else if (strcmp(k, "--order-id") == 0) {
            if (parse_number(k, v, 1, UINT64_MAX, &order_id) != 0)
                return 2;
        } else if (strcmp(k, "--wait") == 0) {
            if (parse_number(k, v, 1, 86400, &wait_arg) != 0)
                return 2;
            wait_s = (int)wait_arg;
        } else {
            fprintf(stderr, "first-order: unknown option %s (see first-order --help)\n", k);
            return 2;
        }
    }
    if (argc % 2 == 0) {
        fprintf(stderr, "first-order: %s wants a value: options come in pairs, --name value (see first-order --help)\n",
                argv[argc - 1]);
        return 2;
    }
    if (order_id == 0)
        order_id = wall_ms(); /* unique enough for a first try */

    /* The order service's handle and its broker client. */
    hg_order_db_params_t p = {
        .socket = socket, .user = user, .password = getenv("HG_MYSQL_PASSWORD"), .database = database
    };
    hg_order_error_t err = { 0 };
    hg_order_db *db = hg_order_db_open(&p, &err);
    if (db == NULL) {
        fprintf(stderr, "first-order: database: %s\n", err.message);
        return 1;
    }
    hg_client_t *client = NULL;
    hg_error_t cerr = { 0 };
    if (hg_client_open(uri, NULL, &client, &cerr) != HG_OK) {
        fprintf(stderr, "first-order: broker: %s\n", cerr.message);
        hg_order_db_close(db);
        return 1;
    }

    /* 1. One transaction: the order, its item, the stock reservation, the outbox row. */
    uint64_t now = wall_ms(), expire = now + timeout_ms;
    char sql[512];
    MYSQL *m = hg_order_db_mysql(db, &err);
    int ok = m != NULL;
    if (ok) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO orders (id, user_id, status, created_at, expire_at) VALUES (%" PRIu64
                 ", 1, 'pending', FROM_UNIXTIME(%" PRIu64 ".%03u), FROM_UNIXTIME(%" PRIu64 ".%03u))",
                 order_id, now / 1000, (unsigned)(now % 1000), expire / 1000, (unsigned)(expire % 1000));
        ok = run(m, sql) == 0;
    }
    if (ok) {
        snprintf(sql, sizeof sql, "INSERT INTO order_items (order_id, sku_id, qty) VALUES (%" PRIu64 ", 1, 1)",
                 order_id);
        ok = run(m, sql) == 0 && run(m, "UPDATE stock SET available = available - 1, reserved = reserved + 1"
                                        " WHERE sku_id = 1 AND available >= 1") == 0;
        if (ok && mysql_affected_rows(m) != 1) {
            fprintf(stderr, "first-order: SKU 1 is out of stock (or has no stock row)\n");
            ok = 0;
        }
    }
    if (ok && hg_order_timeout_create(db, order_id, expire, 0, &err) != 0) {
        fprintf(stderr, "first-order: %s\n", err.message);
        ok = 0;
    }
    if (!ok) {
        hg_order_db_rollback(db);
    } else if (hg_order_db_commit(db, &err) != 0) {
        fprintf(stderr, "first-order: %s\n", err.message);
        ok = 0;
    }
    if (!ok) {
        hg_client_close(client);
        hg_order_db_close(db);
        return 1;
    }

    /* 2. After the COMMIT: the fast path. Whatever it answers, the order is covered. */
    char id[HG_ID_MAX] = "", why[256];
    hg_order_publish_outcome_t o = hg_order_timeout_publish(db, client, NULL, order_id, expire, id, why, sizeof why);
    printf("order %" PRIu64 " created, expires in %" PRIu64 " ms; timeout message %s: %s%s%s\n", order_id, timeout_ms,
           id[0] ? id : "-", hg_order_publish_outcome_name(o), why[0] ? " — " : "", why);

    /* 3. Watch it: hourglass-consumer cancels it when the message comes due. */
    int rc = 1;
    for (uint64_t end = wall_ms() + (uint64_t)wait_s * 1000; wall_ms() < end;) {
        m = hg_order_db_mysql(db, &err);
        snprintf(
            sql, sizeof sql,
            "SELECT status, COALESCE(cancel_reason, ''),"
            " TIMESTAMPDIFF(MICROSECOND, expire_at, COALESCE(cancelled_at, NOW(6))) FROM orders WHERE id = %" PRIu64,
            order_id);
        MYSQL_RES *res = m != NULL && mysql_query(m, sql) == 0 ? mysql_store_result(m) : NULL;
        MYSQL_ROW row = res != NULL ? mysql_fetch_row(res) : NULL;
        int done = 0;
        if (row != NULL && strcmp(row[0], "pending") != 0) {
            long long late_us = strtoll(row[2], NULL, 10);
            printf("order %" PRIu64 " %s%s%s %.3f s after its expiry\n", order_id, row[0], row[1][0] ? " by " : "",
                   row[1], (double)late_us / 1e6);
            rc = strcmp(row[0], "cancelled") == 0 && late_us >= 0 ? 0 : 1;
            done = 1;
        }
        mysql_free_result(res);
        hg_order_db_rollback(db); /* end the read's transaction: the next one sees new commits */
        if (done)
            break;
        struct timespec ts = { 0, 100 * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (rc != 0)
        fprintf(stderr,
                "first-order: order %" PRIu64 " not cancelled within %d s: is hourglass-consumer running "
                "on topic order-timeout?\n",
                order_id, wait_s);
    hg_client_close(client);
    hg_order_db_close(db);
    return rc;
}
