/*
 * examples/order-service/order_service.c — a simulated shop on libhourglass:
 * it creates orders at a steady rate and pays some of them, the way a real
 * order service would, so that the rest of Hourglass has something to cancel.
 *
 * Per order, one transaction on the creator's hg_order_db connection
 * (hg_order_db_mysql): INSERT the order, its items, reserve the stock
 * (available → reserved, refused when a SKU runs out), and the outbox row
 * (hg_order_timeout_create); hg_order_db_commit; then the fast path
 * (hg_order_timeout_publish: SEND with the remaining delay, guarded "mark
 * sent"). --drop-sends skips the fast path for a share of the orders, as if
 * the service died between COMMIT and SEND: the compensator's relay must
 * send those. A failed send (the broker is down) makes the creator skip the
 * fast path for a second — an outage must not slow order creation; those
 * rows stay 'new' for the relay too.
 *
 * A share of the orders (--pay-share) gets a payment at a random moment
 * before its expiry; a share of those (--late-share) is timed around the
 * deadline instead (expire_at ± --race-window), racing the cancel. Payments
 * go through hg_order_pay (the claim WHERE status='pending'); a payment that
 * finds the order cancelled is recorded in order_refunds (refunds.sql) as a
 * refund the shop owes.
 *
 * Threads: the creator (one hg_order_db + one hg_client), --payers payment
 * threads (one hg_order_db each) popping a shared min-heap of due payments
 * under one mutex, and the main thread, which writes the counters to --stats
 * every second and handles SIGINT/SIGTERM. After --duration the creator stops;
 * the program exits when every scheduled payment has run.
 */
#include <hourglass/hourglass.h>

#include <mysql.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ITEMS   8
#define MAX_PAYERS  16
#define TX_ATTEMPTS 5 /* a deadlock or lost connection is retried this often */

/* ---------------------------------------------------------------- options */

typedef struct options {
    const char *uri, *topic;
    const char *socket, *host, *user, *password, *database;
    unsigned port;
    double rate;             /* orders per second */
    double duration_s;       /* creation phase */
    uint64_t timeout_ms;     /* order timeout */
    uint64_t relay_after_ms; /* the relay leaves a new row alone this long */
    double pay_share, late_share, drop_sends;
    uint64_t race_window_ms;
    unsigned skus, max_items, max_qty, payers;
    uint64_t first_id;
    uint64_t seed;
    const char *stats_path;
} options_t;

static options_t opt = {
    .uri = "hourglass://127.0.0.1:7379",
    .topic = "order-timeout",
    .database = "shop",
    .rate = 20,
    .duration_s = 60,
    .timeout_ms = 10000,
    .relay_after_ms = 2000,
    .pay_share = 0.6,
    .late_share = 0.15,
    .drop_sends = 0,
    .race_window_ms = 1000,
    .skus = 20,
    .max_items = 3,
    .max_qty = 3,
    .payers = 2,
    .first_id = 1,
    .seed = 1,
};

/* ---------------------------------------------------------------- counters */

typedef struct counters {
    atomic_ullong created, rejected, create_failed;
    atomic_ullong sent, sent_kept, dropped, send_failed, mark_failed;
    atomic_ullong scheduled, late_scheduled, paid, paid_late, refunds, pay_failed, pays_left;
} counters_t;

static counters_t count;
static atomic_int stopping;     /* a signal: stop everything now */
static atomic_int creating = 1; /* the creator is still creating */
static uint64_t started_ms;

static const struct {
    const char *name;
    size_t offset;
} counter_names[] = {
    { "created", offsetof(counters_t, created) },
    { "rejected_out_of_stock", offsetof(counters_t, rejected) },
    { "create_failed", offsetof(counters_t, create_failed) },
    { "fast_path_sent", offsetof(counters_t, sent) },
    { "fast_path_sent_kept", offsetof(counters_t, sent_kept) },
    { "fast_path_dropped", offsetof(counters_t, dropped) },
    { "fast_path_send_failed", offsetof(counters_t, send_failed) },
    { "fast_path_mark_failed", offsetof(counters_t, mark_failed) },
    { "payments_scheduled", offsetof(counters_t, scheduled) },
    { "payments_racing", offsetof(counters_t, late_scheduled) },
    { "paid", offsetof(counters_t, paid) },
    { "paid_racing", offsetof(counters_t, paid_late) },
    { "refunds", offsetof(counters_t, refunds) },
    { "pay_failed", offsetof(counters_t, pay_failed) },
    { "payments_left", offsetof(counters_t, pays_left) },
};

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stopping)
        ;
}

/* Write the counters as "name value" lines to path, atomically (a rename). */
static void write_stats(const char *path, int final)
{
    if (path == NULL)
        return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return;
    for (size_t i = 0; i < sizeof counter_names / sizeof counter_names[0]; i++)
        fprintf(f, "%s %llu\n", counter_names[i].name,
                (unsigned long long)atomic_load((atomic_ullong *)((char *)&count + counter_names[i].offset)));
    fprintf(f, "elapsed_ms %llu\nfinished %d\n", (unsigned long long)(wall_ms() - started_ms), final);
    fclose(f);
    rename(tmp, path);
}

static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double uniform(uint64_t *s)
{
    return (double)(next_random(s) >> 11) / 9007199254740992.0;
}

/* ---------------------------------------------------------------- the payment heap */

typedef struct payment {
    uint64_t at_ms, order_id;
    int racing;
} payment_t;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    payment_t *items;
    size_t n, cap;
} heap = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0 };

static void heap_push(payment_t p)
{
    pthread_mutex_lock(&heap.lock);
    if (heap.n == heap.cap) {
        heap.cap = heap.cap ? heap.cap * 2 : 1024;
        heap.items = realloc(heap.items, heap.cap * sizeof *heap.items);
        if (heap.items == NULL)
            abort();
    }
    size_t i = heap.n++;
    while (i > 0 && heap.items[(i - 1) / 2].at_ms > p.at_ms) {
        heap.items[i] = heap.items[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap.items[i] = p;
    atomic_fetch_add(&count.pays_left, 1);
    pthread_cond_broadcast(&heap.cond);
    pthread_mutex_unlock(&heap.lock);
}

/* Wait for the earliest payment to come due. Returns 1 with *out, or 0 when
 * there is nothing left to do (stopping, or creation over and heap empty). */
static int heap_pop_due(payment_t *out)
{
    pthread_mutex_lock(&heap.lock);
    for (;;) {
        if (stopping || (heap.n == 0 && !creating)) {
            pthread_mutex_unlock(&heap.lock);
            return 0;
        }
        uint64_t now = wall_ms();
        if (heap.n > 0 && heap.items[0].at_ms <= now)
            break;
        uint64_t wait = heap.n > 0 ? heap.items[0].at_ms - now : 200;
        if (wait > 200)
            wait = 200; /* wake up for stop and new items anyway */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(wait * 1000000u);
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&heap.cond, &heap.lock, &ts);
    }
    *out = heap.items[0];
    payment_t last = heap.items[--heap.n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= heap.n)
            break;
        if (c + 1 < heap.n && heap.items[c + 1].at_ms < heap.items[c].at_ms)
            c++;
        if (heap.items[c].at_ms >= last.at_ms)
            break;
        heap.items[i] = heap.items[c];
        i = c;
    }
    if (heap.n > 0)
        heap.items[i] = last;
    atomic_fetch_sub(&count.pays_left, 1);
    pthread_mutex_unlock(&heap.lock);
    return 1;
}

/* ---------------------------------------------------------------- database */

static hg_order_db *open_db(void)
{
    hg_order_db_params_t p = { .host = opt.host,
                               .socket = opt.socket,
                               .port = opt.port,
                               .user = opt.user,
                               .password = opt.password,
                               .database = opt.database,
                               .lock_wait_timeout_s = 5 };
    hg_order_error_t err = { 0 };
    hg_order_db *db = hg_order_db_open(&p, &err);
    if (db == NULL)
        fprintf(stderr, "order-service: cannot open the database: %s\n", err.message);
    return db;
}

/* Run sql in the handle's open transaction (a result set is read and
 * dropped). Returns 0, or -1 with err filled (the caller rolls back). *rows
 * gets the affected rows when not NULL. */
static int exec(hg_order_db *db, const char *sql, uint64_t *rows, hg_order_error_t *err)
{
    MYSQL *m = hg_order_db_mysql(db, err);
    if (m == NULL)
        return -1;
    if (mysql_query(m, sql) != 0) {
        err->code = mysql_errno(m);
        snprintf(err->message, sizeof err->message, "%.120s: %u %s", sql, mysql_errno(m), mysql_error(m));
        return -1;
    }
    if (rows != NULL)
        *rows = mysql_affected_rows(m);
    MYSQL_RES *res = mysql_store_result(m);
    mysql_free_result(res);
    return 0;
}

/* The first column of the first row of a query into buf ("" and *found 0
 * when there is no row). Returns 0 / -1 with err filled. */
static int query_first(hg_order_db *db, const char *sql, char *buf, size_t len, int *found, hg_order_error_t *err)
{
    MYSQL *m = hg_order_db_mysql(db, err);
    if (m == NULL)
        return -1;
    MYSQL_RES *res = NULL;
    if (mysql_query(m, sql) != 0 || (res = mysql_store_result(m)) == NULL) {
        err->code = mysql_errno(m);
        snprintf(err->message, sizeof err->message, "%.120s: %u %s", sql, mysql_errno(m), mysql_error(m));
        return -1;
    }
    MYSQL_ROW row = mysql_fetch_row(res);
    *found = row != NULL;
    snprintf(buf, len, "%s", row != NULL && row[0] != NULL ? row[0] : "");
    mysql_free_result(res);
    return 0;
}

typedef enum {
    CREATE_OK,
    CREATE_OUT_OF_STOCK,
    CREATE_FAILED
} create_result_t;

/* The order's transaction: order, items, stock reservation, outbox row, COMMIT.
 * SKUs are reserved in ascending order so two transactions never lock two
 * stock rows in opposite orders. */
static create_result_t create_order(hg_order_db *db, uint64_t id, uint64_t now_ms, uint64_t expire_ms, uint64_t *rnd,
                                    hg_order_error_t *err)
{
    unsigned n = 1 + (unsigned)(next_random(rnd) % opt.max_items), skus[MAX_ITEMS], qty[MAX_ITEMS];
    for (unsigned i = 0; i < n; i++) {
        unsigned s;
        int dup;
        do { /* distinct SKUs: order_items' key is (order_id, sku_id) */
            s = 1 + (unsigned)(next_random(rnd) % opt.skus);
            dup = 0;
            for (unsigned j = 0; j < i; j++)
                dup |= skus[j] == s;
        } while (dup);
        unsigned j = i;
        for (; j > 0 && skus[j - 1] > s; j--)
            skus[j] = skus[j - 1];
        skus[j] = s;
    }
    for (unsigned i = 0; i < n; i++)
        qty[i] = 1 + (unsigned)(next_random(rnd) % opt.max_qty);

    for (int attempt = 0; attempt < TX_ATTEMPTS; attempt++) {
        char sql[512];
        uint64_t rows = 0;
        snprintf(sql, sizeof sql,
                 "INSERT INTO orders (id, user_id, status, created_at, expire_at) VALUES (%" PRIu64 ", %" PRIu64
                 ", 'pending', FROM_UNIXTIME(%" PRIu64 ".%03u), FROM_UNIXTIME(%" PRIu64 ".%03u))",
                 id, 1 + next_random(rnd) % 1000, now_ms / 1000, (unsigned)(now_ms % 1000), expire_ms / 1000,
                 (unsigned)(expire_ms % 1000));
        int failed = exec(db, sql, NULL, err) != 0;
        for (unsigned i = 0; !failed && i < n; i++) {
            snprintf(sql, sizeof sql, "INSERT INTO order_items (order_id, sku_id, qty) VALUES (%" PRIu64 ", %u, %u)",
                     id, skus[i], qty[i]);
            failed = exec(db, sql, NULL, err) != 0;
            if (failed)
                break;
            snprintf(sql, sizeof sql,
                     "UPDATE stock SET available = available - %u, reserved = reserved + %u"
                     " WHERE sku_id = %u AND available >= %u",
                     qty[i], qty[i], skus[i], qty[i]);
            failed = exec(db, sql, &rows, err) != 0;
            if (!failed && rows != 1) {
                hg_order_db_rollback(db);
                return CREATE_OUT_OF_STOCK;
            }
        }
        if (!failed)
            failed = hg_order_timeout_create(db, id, expire_ms, (uint32_t)opt.relay_after_ms, err) != 0;
        if (failed) {
            hg_order_db_rollback(db);
        } else if (hg_order_db_commit(db, err) == 0) {
            return CREATE_OK;
        } else if (hg_order_classify(err->code) == HG_ORDER_TRANSIENT) {
            /* The COMMIT's outcome is unknown: did the order make it? */
            char one[8];
            int found = 0;
            snprintf(sql, sizeof sql, "SELECT 1 FROM orders WHERE id = %" PRIu64, id);
            int rc = query_first(db, sql, one, sizeof one, &found, err);
            hg_order_db_rollback(db);
            if (rc == 0 && found)
                return CREATE_OK;
        }
        if (hg_order_classify(err->code) != HG_ORDER_TRANSIENT)
            return CREATE_FAILED;
        sleep_ms(20u << attempt);
    }
    return CREATE_FAILED;
}

/* ---------------------------------------------------------------- creator */

static hg_client_t *open_client(void)
{
    hg_client_opts_t o;
    hg_client_opts_init(&o);
    o.connect_timeout_ms = 500;
    o.read_timeout_ms = 2000;
    o.reconnect = 0; /* one connection attempt per send: a broker that is down fails fast, the relay takes over */
    hg_client_t *c = NULL;
    hg_error_t err = { 0 };
    if (hg_client_open(opt.uri, &o, &c, &err) != HG_OK) {
        fprintf(stderr, "order-service: broker: %s\n", err.message);
        return NULL;
    }
    return c;
}

static void *creator_main(void *arg)
{
    hg_order_db *db = arg;
    hg_client_t *client = open_client();
    uint64_t rnd = opt.seed * 2654435761u + 1, last_open = wall_ms(), broker_down_until = 0;
    uint64_t total = (uint64_t)(opt.rate * opt.duration_s + 0.5);
    uint64_t t0 = wall_ms();
    for (uint64_t i = 0; i < total && !stopping; i++) {
        uint64_t due = t0 + (uint64_t)((double)i * 1000.0 / opt.rate);
        uint64_t now = wall_ms();
        if (due > now)
            sleep_ms(due - now); /* pacing only */
        if (stopping)
            break;
        now = wall_ms();
        uint64_t id = opt.first_id + i, expire = now + opt.timeout_ms;
        hg_order_error_t err = { 0 };
        create_result_t r = create_order(db, id, now, expire, &rnd, &err);
        if (r == CREATE_OUT_OF_STOCK) {
            atomic_fetch_add(&count.rejected, 1);
            continue;
        }
        if (r == CREATE_FAILED) {
            atomic_fetch_add(&count.create_failed, 1);
            fprintf(stderr, "order-service: order %" PRIu64 ": %s\n", id, err.message);
            continue;
        }
        atomic_fetch_add(&count.created, 1);

        if (uniform(&rnd) < opt.drop_sends) {
            atomic_fetch_add(&count.dropped, 1); /* as if the service died right after the COMMIT */
        } else if (wall_ms() < broker_down_until) {
            /* The broker failed a send less than a second ago: do not slow the shop down
             * trying again; the row stays 'new' and the relay sends it. */
            atomic_fetch_add(&count.send_failed, 1);
        } else {
            if (client == NULL && wall_ms() - last_open >= 1000) {
                last_open = wall_ms();
                client = open_client();
            }
            char why[256] = "no broker connection";
            hg_order_publish_outcome_t o =
                client != NULL ? hg_order_timeout_publish(db, client, opt.topic, id, expire, NULL, why, sizeof why)
                               : HG_ORDER_PUBLISH_SEND_FAILED;
            atomic_ullong *c[] = { [HG_ORDER_PUBLISH_SENT] = &count.sent,
                                   [HG_ORDER_PUBLISH_SENT_KEPT] = &count.sent_kept,
                                   [HG_ORDER_PUBLISH_SEND_FAILED] = &count.send_failed,
                                   [HG_ORDER_PUBLISH_MARK_FAILED] = &count.mark_failed };
            atomic_fetch_add(c[o], 1);
            if (o == HG_ORDER_PUBLISH_SEND_FAILED)
                broker_down_until = wall_ms() + 1000;
        }

        if (uniform(&rnd) < opt.pay_share) {
            payment_t p = { .order_id = id };
            if (uniform(&rnd) < opt.late_share) {
                int64_t offset = (int64_t)((uniform(&rnd) * 2 - 1) * (double)opt.race_window_ms);
                p.at_ms = (uint64_t)((int64_t)expire + offset);
                p.racing = 1;
                atomic_fetch_add(&count.late_scheduled, 1);
            } else {
                p.at_ms = now + (uint64_t)((0.05 + 0.9 * uniform(&rnd)) * (double)opt.timeout_ms);
            }
            atomic_fetch_add(&count.scheduled, 1);
            heap_push(p);
        }
    }
    hg_client_close(client);
    pthread_mutex_lock(&heap.lock);
    atomic_store(&creating, 0);
    pthread_cond_broadcast(&heap.cond);
    pthread_mutex_unlock(&heap.lock);
    return NULL;
}

/* ---------------------------------------------------------------- payers */

/* The order's status ("paid", "cancelled", …) into buf; 0 / -1. */
static int order_status(hg_order_db *db, uint64_t id, char *buf, size_t len, hg_order_error_t *err)
{
    char sql[96];
    int found = 0;
    snprintf(sql, sizeof sql, "SELECT status FROM orders WHERE id = %" PRIu64, id);
    int rc = query_first(db, sql, buf, len, &found, err);
    hg_order_db_rollback(db);
    if (rc == 0 && !found)
        snprintf(buf, len, "missing");
    return rc;
}

static void pay_one(hg_order_db *db, const payment_t *p)
{
    hg_order_error_t err = { 0 };
    hg_order_outcome_t o = HG_ORDER_TRANSIENT;
    int attempts = 0;
    while (attempts++ < TX_ATTEMPTS && hg_order_pay(db, p->order_id, &o, &err) != 0 && o == HG_ORDER_TRANSIENT)
        sleep_ms(20u << attempts);
    if (o == HG_ORDER_PAID) {
        atomic_fetch_add(&count.paid, 1);
        atomic_fetch_add(&count.paid_late, (unsigned long long)p->racing);
        return;
    }
    char status[32] = "";
    if (o == HG_ORDER_NOT_PENDING && order_status(db, p->order_id, status, sizeof status, &err) == 0) {
        if (strcmp(status, "paid") == 0) { /* an earlier attempt of ours won, its COMMIT reply was lost */
            atomic_fetch_add(&count.paid, 1);
            atomic_fetch_add(&count.paid_late, (unsigned long long)p->racing);
            return;
        }
        /* Cancelled first: the customer paid for an order that no longer exists. */
        char sql[192];
        snprintf(sql, sizeof sql,
                 "INSERT IGNORE INTO order_refunds (order_id, paid_at, reason) VALUES (%" PRIu64
                 ", NOW(6), 'paid after the cancel')",
                 p->order_id);
        for (int i = 0; i < TX_ATTEMPTS; i++) {
            if (exec(db, sql, NULL, &err) == 0 && hg_order_db_commit(db, &err) == 0) {
                atomic_fetch_add(&count.refunds, 1);
                return;
            }
            hg_order_db_rollback(db);
            sleep_ms(20u << i);
        }
    }
    atomic_fetch_add(&count.pay_failed, 1);
    fprintf(stderr, "order-service: payment of order %" PRIu64 ": %s (%s)\n", p->order_id, hg_order_outcome_name(o),
            err.message);
}

static void *payer_main(void *arg)
{
    hg_order_db *db = arg;
    payment_t p;
    while (heap_pop_due(&p))
        pay_one(db, &p);
    return NULL;
}

/* ---------------------------------------------------------------- main */

/* "250ms", "10s", "2m", "1h"; a bare number is seconds. Returns 0 / -1. */
static int parse_duration_ms(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno != 0 || v < 0)
        return -1;
    static const struct {
        const char *unit;
        double ms;
    } units[] = {
        { "", 1000 }, { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 },
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].unit) == 0) {
            *out = (uint64_t)(v * units[i].ms + 0.5);
            return 0;
        }
    return -1;
}

static void usage(FILE *f)
{
    fputs("usage: order-service [OPTIONS]\n"
          "A simulated shop on libhourglass: creates orders (order + items + stock reservation + outbox row in\n"
          "one transaction, then the fast-path SEND), pays a share of them, records refunds for payments that\n"
          "lose to the cancel. Needs sql/schema.sql, stock rows for SKUs 1..--skus and refunds.sql.\n\n"
          "  --uri URI              broker [hourglass://127.0.0.1:7379]\n"
          "  --topic T              topic of the timeouts [order-timeout]\n"
          "  --mysql-socket PATH | --mysql-host H [--mysql-port N]\n"
          "  --mysql-user U  --mysql-password P (or $HG_MYSQL_PASSWORD)  --mysql-database D [shop]\n"
          "  --rate N               orders per second [20]\n"
          "  --duration S           seconds of order creation; then the scheduled payments finish [60]\n"
          "  --timeout D            order timeout (250ms, 10s, 2m; bare number: seconds) [10s]\n"
          "  --relay-after D        the relay leaves a new outbox row alone this long [2s]\n"
          "  --pay-share F          share of orders that get paid [0.6]\n"
          "  --late-share F         share of those paid around the deadline, racing the cancel [0.15]\n"
          "  --race-window D        racing payments land within expire_at +/- this [1s]\n"
          "  --drop-sends F         share of fast-path sends skipped (the relay must send them) [0]\n"
          "  --skus N  --max-items N  --max-qty N   the basket [20, 3, 3]\n"
          "  --payers N             payment threads [2]\n"
          "  --first-id N           id of the first order [1]\n"
          "  --seed N               random seed [1]\n"
          "  --stats FILE           counters as 'name value' lines, rewritten every second and at exit\n"
          "Exit status: 0 when every order was created and every payment settled; 1 otherwise; 2 usage.\n",
          f);
}

static int parse_args(int argc, char **argv)
{
    static const struct option longs[] = {
        { "uri", 1, 0, 'u' },
        { "topic", 1, 0, 't' },
        { "mysql-socket", 1, 0, 'S' },
        { "mysql-host", 1, 0, 'H' },
        { "mysql-port", 1, 0, 'P' },
        { "mysql-user", 1, 0, 'U' },
        { "mysql-password", 1, 0, 'W' },
        { "mysql-database", 1, 0, 'D' },
        { "rate", 1, 0, 'r' },
        { "duration", 1, 0, 'd' },
        { "timeout", 1, 0, 'T' },
        { "relay-after", 1, 0, 'A' },
        { "pay-share", 1, 0, 'p' },
        { "late-share", 1, 0, 'l' },
        { "race-window", 1, 0, 'w' },
        { "drop-sends", 1, 0, 'x' },
        { "skus", 1, 0, 'k' },
        { "max-items", 1, 0, 'i' },
        { "max-qty", 1, 0, 'q' },
        { "payers", 1, 0, 'y' },
        { "first-id", 1, 0, 'f' },
        { "seed", 1, 0, 's' },
        { "stats", 1, 0, 'o' },
        { "help", 0, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    opt.password = getenv("HG_MYSQL_PASSWORD");
    int c, li = -1;
    while ((c = getopt_long(argc, argv, "h", longs, &li)) != -1) {
        int bad = 0;
        switch (c) {
        case 'u':
            opt.uri = optarg;
            break;
        case 't':
            opt.topic = optarg;
            break;
        case 'S':
            opt.socket = optarg;
            break;
        case 'H':
            opt.host = optarg;
            break;
        case 'P':
            opt.port = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'U':
            opt.user = optarg;
            break;
        case 'W':
            opt.password = optarg;
            break;
        case 'D':
            opt.database = optarg;
            break;
        case 'r':
            opt.rate = strtod(optarg, NULL);
            bad = !(opt.rate > 0 && opt.rate <= 100000);
            break;
        case 'd':
            opt.duration_s = strtod(optarg, NULL);
            bad = !(opt.duration_s >= 0);
            break;
        case 'T':
            bad = parse_duration_ms(optarg, &opt.timeout_ms) != 0 || opt.timeout_ms == 0;
            break;
        case 'A':
            bad = parse_duration_ms(optarg, &opt.relay_after_ms) != 0 || opt.relay_after_ms == 0;
            break;
        case 'p':
            opt.pay_share = strtod(optarg, NULL);
            bad = opt.pay_share < 0 || opt.pay_share > 1;
            break;
        case 'l':
            opt.late_share = strtod(optarg, NULL);
            bad = opt.late_share < 0 || opt.late_share > 1;
            break;
        case 'w':
            bad = parse_duration_ms(optarg, &opt.race_window_ms) != 0;
            break;
        case 'x':
            opt.drop_sends = strtod(optarg, NULL);
            bad = opt.drop_sends < 0 || opt.drop_sends > 1;
            break;
        case 'k':
            opt.skus = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'i':
            opt.max_items = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'q':
            opt.max_qty = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'y':
            opt.payers = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'f':
            opt.first_id = strtoull(optarg, NULL, 10);
            bad = opt.first_id == 0;
            break;
        case 's':
            opt.seed = strtoull(optarg, NULL, 10);
            break;
        case 'o':
            opt.stats_path = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "order-service: bad value '%s' for --%s (see --help)\n", optarg,
                    li >= 0 ? longs[li].name : "?");
            return -1;
        }
    }
    if (optind < argc || opt.max_items < 1 || opt.max_items > MAX_ITEMS || opt.skus < opt.max_items ||
        opt.max_qty < 1 || opt.payers < 1 || opt.payers > MAX_PAYERS) {
        fprintf(stderr,
                "order-service: want --max-items 1..%d, --skus >= --max-items, --max-qty >= 1 and "
                "--payers 1..%d, and no other arguments (see --help)\n",
                MAX_ITEMS, MAX_PAYERS);
        return -1;
    }
    if (opt.seed == 0)
        opt.seed = 1;
    return 0;
}

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stopping, 1);
}

int main(int argc, char **argv)
{
    if (parse_args(argc, argv) != 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (hg_order_library_init() != 0)
        return 1;

    /* Every handle opened up front: a wrong password or a missing table shows now. */
    hg_order_db *creator_db = open_db(), *payer_db[MAX_PAYERS] = { 0 };
    int ok = creator_db != NULL;
    for (unsigned i = 0; ok && i < opt.payers; i++)
        ok = (payer_db[i] = open_db()) != NULL;
    hg_order_error_t err = { 0 };
    if (ok && (exec(creator_db, "SELECT 1 FROM order_refunds LIMIT 0", NULL, &err) != 0 ||
               exec(creator_db, "SELECT 1 FROM order_timeout_msg LIMIT 0", NULL, &err) != 0)) {
        /* 1142: the table is there but this user may not read it; 1146: it is not there. */
        const char *hint = err.code == 1142 ? "grant the user what examples/order-service/README.md lists"
                                            : "load sql/schema.sql and examples/order-service/refunds.sql first";
        fprintf(stderr, "order-service: %s\n(%s)\n", err.message, hint);
        ok = 0;
    }
    hg_order_db_rollback(creator_db);
    if (!ok) {
        hg_order_db_close(creator_db);
        for (unsigned i = 0; i < opt.payers; i++)
            hg_order_db_close(payer_db[i]);
        return 1;
    }

    started_ms = wall_ms();
    pthread_t creator, payers[MAX_PAYERS];
    pthread_create(&creator, NULL, creator_main, creator_db);
    for (unsigned i = 0; i < opt.payers; i++)
        pthread_create(&payers[i], NULL, payer_main, payer_db[i]);
    while (!stopping && (atomic_load(&creating) || atomic_load(&count.pays_left) > 0)) {
        write_stats(opt.stats_path, 0);
        sleep_ms(1000);
    }
    pthread_mutex_lock(&heap.lock);
    pthread_cond_broadcast(&heap.cond);
    pthread_mutex_unlock(&heap.lock);
    pthread_join(creator, NULL);
    for (unsigned i = 0; i < opt.payers; i++)
        pthread_join(payers[i], NULL);
    write_stats(opt.stats_path, 1);

    printf("order-service: %llu orders created (%llu rejected, %llu failed); fast path: %llu sent, %llu kept, "
           "%llu dropped, %llu send failed, %llu mark failed; payments: %llu paid (%llu racing the deadline), "
           "%llu refunds owed, %llu failed, %llu not run\n",
           (unsigned long long)count.created, (unsigned long long)count.rejected,
           (unsigned long long)count.create_failed, (unsigned long long)count.sent, (unsigned long long)count.sent_kept,
           (unsigned long long)count.dropped, (unsigned long long)count.send_failed,
           (unsigned long long)count.mark_failed, (unsigned long long)count.paid, (unsigned long long)count.paid_late,
           (unsigned long long)count.refunds, (unsigned long long)count.pay_failed,
           (unsigned long long)count.pays_left);
    hg_order_db_close(creator_db);
    for (unsigned i = 0; i < opt.payers; i++)
        hg_order_db_close(payer_db[i]);
    free(heap.items);
    return count.create_failed == 0 && count.pay_failed == 0 && count.pays_left == 0 && !stopping ? 0 : 1;
}
