/*
 * bench/floor_server.c — hourglass-floor: the least a durable delay broker can
 * do for hourglass-bench's mixed workload, as a bound to read the broker's
 * flood figures against. Bench-only; not a product.
 *
 * The mixed workload (bench/hourglass_bench.c, part "mixed"): 8 producers
 * pipelining `SEND topic payload DELAY 5s`, 2 consumers pipelining
 * `ACK group id...` with `PULL group topic COUNT n BLOCK ms`. This server does
 * for it what every durable design must do and nothing more:
 *
 *   - one thread, one epoll loop, RESP arrays parsed in place;
 *   - every SEND's record (id, due time, topic, payload) appended to one log
 *     file written in full before the first client (so an fdatasync writes
 *     data only: no size change, no extent conversion, no journal commit);
 *   - one pwrite and one fdatasync per loop pass (group commit), and a SEND's
 *     reply (its id) leaves only after that fdatasync;
 *   - the messages in memory in one FIFO, which is due order because every
 *     SEND of the workload has the same delay (a message with a shorter delay
 *     than the one before it waits behind it: late, never early);
 *   - PULL hands out what is due (BLOCK parks the connection until something
 *     is due or the time is up), ACK frees it.
 *
 * What it omits, each of which a real broker needs and pays for, so that its
 * rate is an upper bound on the rate of any durable single-loop design of
 * ours on the same cores (the syscalls per pass and the fdatasync are the
 * same, everything else is less):
 *   - ACK is not durable (no record, no fsync): a crash redelivers;
 *   - no leases (an unacknowledged message is never redelivered), no NACK,
 *     retries, DLQ, keys, dedup, levels, groups or per-topic queues (one
 *     FIFO for every topic; the group and topic of PULL/ACK are not checked);
 *   - no CRC, no record framing that survives a torn write, no recovery: the
 *     log is written, never read; it wraps to its start when full;
 *   - no metrics, config, TLS, AUTH or client limits.
 *
 * SEND takes DELAY d or LEVEL n (the broker's default table of 18 levels, so
 * hourglass-bench's LEVEL parts, e.g. `--only delivery`, run against it too).
 * Commands: PING, SEND, PULL, ACK, FLUSHALL (drops every message: the bench
 * empties the server between runs), INFO (records, fdatasyncs and their total
 * time, CPU seconds: the bench reads them around each run). Anything else, and any argument it cannot
 * read, gets an -ERR naming the problem; a byte stream that is not RESP
 * arrays of bulk strings gets an -ERR and the connection is closed.
 *
 * --grow appends to an empty log instead (each fdatasync then also commits
 * the file's new size, as LevelDB's log and Redis's AOF do): what the
 * pre-written log is worth.
 *
 * Usage: hourglass-floor --port PORT --dir DIR [--log-mib N | --grow]
 */
#define _GNU_SOURCE
#include "base/clock.h"
#include "base/units.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROGRAM      "hourglass-floor"
#define MIB          (1024L * 1024L)
#define MAX_ARGS     4096        /* most arguments of one command (ACK of 1000 ids fits) */
#define MAX_BULK     (16L * MIB) /* longest argument */
#define READ_CHUNK   (64 * 1024)
#define MAX_EVENTS   256
#define ID_HEX_CHARS 16

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROGRAM ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* ---- growable byte buffer ------------------------------------------------------ */

typedef struct bytes {
    char *p;
    size_t len, cap;
} bytes_t;

static void bytes_reserve(bytes_t *b, size_t more)
{
    if (b->len + more <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    b->p = realloc(b->p, cap);
    if (b->p == NULL)
        die("out of memory (%zu bytes)", cap);
    b->cap = cap;
}

static void bytes_add(bytes_t *b, const void *p, size_t n)
{
    bytes_reserve(b, n);
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void bytes_printf(bytes_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    bytes_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void bytes_bulk(bytes_t *b, const char *p, size_t n)
{
    bytes_printf(b, "$%zu\r\n", n);
    bytes_add(b, p, n);
    bytes_add(b, "\r\n", 2);
}

/* ---- messages: one ring indexed by id ------------------------------------------ */

/* ids [base, next_deliver) have been handed out (NULL once acknowledged);
 * ids [next_deliver, next_id) wait in due order. */
typedef struct message {
    uint64_t due_ms;
    uint32_t topic_len, payload_len;
    char data[]; /* topic, then payload */
} message_t;

static struct {
    message_t **slot;
    uint64_t cap; /* power of two */
    uint64_t base, next_deliver, next_id;
} store = { .base = 1, .next_deliver = 1, .next_id = 1 };

static message_t **slot_of(uint64_t id)
{
    return &store.slot[id & (store.cap - 1)];
}

static void store_grow(void)
{
    uint64_t cap = store.cap ? store.cap * 2 : 1u << 20;
    message_t **slot = calloc(cap, sizeof *slot);
    if (slot == NULL)
        die("out of memory (%" PRIu64 " message slots)", cap);
    for (uint64_t id = store.base; id < store.next_id; id++)
        slot[id & (cap - 1)] = *slot_of(id);
    free(store.slot);
    store.slot = slot, store.cap = cap;
}

static uint64_t store_add(const char *topic, size_t topic_len, const char *payload, size_t payload_len, uint64_t due_ms)
{
    if (store.next_id - store.base >= store.cap)
        store_grow();
    message_t *m = malloc(sizeof *m + topic_len + payload_len);
    if (m == NULL)
        die("out of memory (a message of %zu bytes)", payload_len);
    m->due_ms = due_ms, m->topic_len = (uint32_t)topic_len, m->payload_len = (uint32_t)payload_len;
    memcpy(m->data, topic, topic_len);
    memcpy(m->data + topic_len, payload, payload_len);
    uint64_t id = store.next_id++;
    *slot_of(id) = m;
    return id;
}

static int store_due(uint64_t now_ms)
{
    return store.next_deliver < store.next_id && (*slot_of(store.next_deliver))->due_ms <= now_ms;
}

/* 1 when id was handed out and not yet acknowledged (now it is, and freed). */
static int store_ack(uint64_t id)
{
    if (id < store.base || id >= store.next_deliver || *slot_of(id) == NULL)
        return 0;
    free(*slot_of(id));
    *slot_of(id) = NULL;
    while (store.base < store.next_deliver && *slot_of(store.base) == NULL)
        store.base++;
    return 1;
}

static void store_flush(void)
{
    for (uint64_t id = store.base; id < store.next_id; id++) {
        free(*slot_of(id));
        *slot_of(id) = NULL;
    }
    store.base = store.next_deliver = store.next_id;
}

/* ---- the log: one pre-written file, one pwrite + fdatasync per loop pass -------- */

static struct {
    int fd;
    int grow; /* --grow: appended at the end, never pre-written (no wrap) */
    off_t size, off;
    bytes_t pending; /* this pass's records */
    uint64_t syncs, records, sync_us;
} wal;

static void log_open(const char *dir, long mib, int grow)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/floor.log", dir);
    wal.fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (wal.fd < 0)
        die("open %s: %s", path, strerror(errno));
    wal.grow = grow;
    if (grow)
        return;
    char *zero = calloc(1, MIB);
    if (zero == NULL)
        die("out of memory");
    for (long i = 0; i < mib; i++)
        if (write(wal.fd, zero, MIB) != MIB)
            die("write %s: %s", path, strerror(errno));
    free(zero);
    if (fsync(wal.fd) != 0)
        die("fsync %s: %s", path, strerror(errno));
    wal.size = (off_t)mib * MIB;
}

static void log_append(uint64_t id, uint64_t due_ms, const char *topic, size_t topic_len, const char *payload,
                       size_t payload_len)
{
    struct {
        uint32_t len, topic_len;
        uint64_t id, due_ms;
    } head = { (uint32_t)(sizeof head + topic_len + payload_len), (uint32_t)topic_len, id, due_ms };
    bytes_add(&wal.pending, &head, sizeof head);
    bytes_add(&wal.pending, topic, topic_len);
    bytes_add(&wal.pending, payload, payload_len);
    wal.records++;
}

/* Write this pass's records and fdatasync them; 0 when there were none. */
static int log_commit(void)
{
    if (wal.pending.len == 0)
        return 0;
    if (!wal.grow && (off_t)wal.pending.len > wal.size)
        die("one loop pass wrote %zu bytes, more than the %lld-byte log (use a larger --log-mib)", wal.pending.len,
            (long long)wal.size);
    if (!wal.grow && wal.off + (off_t)wal.pending.len > wal.size)
        wal.off = 0;
    size_t done = 0;
    while (done < wal.pending.len) {
        ssize_t n = pwrite(wal.fd, wal.pending.p + done, wal.pending.len - done, wal.off + (off_t)done);
        if (n < 0 && errno != EINTR)
            die("pwrite of the log: %s", strerror(errno));
        if (n > 0)
            done += (size_t)n;
    }
    uint64_t t0 = clock_mono_us();
    if (fdatasync(wal.fd) != 0)
        die("fdatasync of the log: %s", strerror(errno));
    wal.sync_us += clock_mono_us() - t0;
    wal.off += (off_t)wal.pending.len;
    wal.pending.len = 0;
    wal.syncs++;
    return 1;
}

/* ---- connections --------------------------------------------------------------- */

typedef struct conn {
    int fd;
    bytes_t in, out;
    size_t out_off;
    int has_send;   /* out holds a SEND reply whose record is not yet synced */
    int dirty;      /* on the dirty list: out has bytes to write */
    int want_write; /* EPOLLOUT registered */
    int closing;    /* close once out is written */
    int blocked;    /* a PULL waits for a due message */
    uint64_t block_until_ms;
    long block_count;
    struct conn *next_dirty, *next_blocked, *next_closed;
} conn_t;

static int epfd;

static volatile sig_atomic_t stopping; /* SIGTERM or SIGINT: print the counters and exit */

static void on_stop_signal(int sig)
{
    (void)sig;
    stopping = 1;
}
static conn_t *dirty_list, *blocked_list;
static conn_t *closed_list; /* closed in this pass: freed at its end, once off the dirty list */

/* What epoll reports for c: input unless a PULL of it is parked (its
 * commands wait; a level-triggered EOF would spin the loop), output while
 * a reply waits for room. */
static void conn_watch(conn_t *c)
{
    struct epoll_event ev = { .events = (c->blocked ? 0 : EPOLLIN) | (c->want_write ? EPOLLOUT : 0), .data.ptr = c };
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void mark_dirty(conn_t *c)
{
    if (!c->dirty) {
        c->dirty = 1;
        c->next_dirty = dirty_list;
        dirty_list = c;
    }
}

static void reply_error(conn_t *c, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bytes_printf(&c->out, "-ERR %s\r\n", msg);
    mark_dirty(c);
}

static void reply_messages(conn_t *c, long count, uint64_t now_ms)
{
    long n = 0;
    for (uint64_t id = store.next_deliver; id < store.next_id && n < count; id++, n++)
        if ((*slot_of(id))->due_ms > now_ms)
            break;
    bytes_printf(&c->out, "*%ld\r\n", n);
    for (long i = 0; i < n; i++) {
        uint64_t id = store.next_deliver++;
        const message_t *m = *slot_of(id);
        char hex[ID_HEX_CHARS + 1];
        snprintf(hex, sizeof hex, "%016" PRIx64, id);
        bytes_add(&c->out, "*6\r\n", 4);
        bytes_bulk(&c->out, hex, ID_HEX_CHARS);
        bytes_bulk(&c->out, m->data, m->topic_len);
        bytes_add(&c->out, "$-1\r\n", 5);
        bytes_bulk(&c->out, m->data + m->topic_len, m->payload_len);
        bytes_printf(&c->out, ":0\r\n:%" PRIu64 "\r\n", m->due_ms);
    }
    mark_dirty(c);
}

typedef struct args {
    int n;
    const char *v[MAX_ARGS];
    size_t len[MAX_ARGS];
} args_t;

static int arg_is(const args_t *a, int i, const char *word)
{
    return a->len[i] == strlen(word) && strncasecmp(a->v[i], word, a->len[i]) == 0;
}

static int parse_long(const char *p, size_t n, long max, long *out)
{
    long v = 0;
    if (n == 0 || n > 18)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

/* LEVEL n: the broker's default level table (RocketMQ's 18 levels), so that
 * hourglass-bench's SEND ... LEVEL parts run against the floor too. */
#define LEVELS 18
static const uint64_t level_ms[LEVELS] = { 1000,   5000,   10000,  30000,  60000,  120000,  180000,  240000,  300000,
                                           360000, 420000, 480000, 540000, 600000, 1200000, 1800000, 3600000, 7200000 };

static void cmd_send(conn_t *c, const args_t *a, uint64_t now_ms)
{
    if (a->n < 3) {
        reply_error(c, "SEND needs a topic and a payload: SEND topic payload [DELAY duration | LEVEL n]");
        return;
    }
    uint64_t delay_ms = 0;
    for (int i = 3; i < a->n; i += 2) {
        int is_delay = arg_is(a, i, "DELAY"), is_level = arg_is(a, i, "LEVEL");
        if (!is_delay && !is_level) {
            reply_error(c, "SEND option '%.*s' is not served by the floor (DELAY, LEVEL)", (int)a->len[i], a->v[i]);
            return;
        }
        if (i + 1 >= a->n) {
            reply_error(c, "SEND %s needs a value", is_delay ? "DELAY" : "LEVEL");
            return;
        }
        char err[200];
        long level;
        if (is_delay &&
            units_parse_duration(a->v[i + 1], a->len[i + 1], UNITS_BARE_MS, &delay_ms, err, sizeof err) != 0) {
            reply_error(c, "SEND DELAY: %s", err);
            return;
        }
        if (is_level) {
            if (parse_long(a->v[i + 1], a->len[i + 1], LEVELS, &level) != 0 || level < 1) {
                reply_error(c, "SEND LEVEL '%.*s' is not a level from 1 to %d", (int)a->len[i + 1], a->v[i + 1],
                            LEVELS);
                return;
            }
            delay_ms = level_ms[level - 1];
        }
    }
    uint64_t due_ms = now_ms + delay_ms;
    uint64_t id = store_add(a->v[1], a->len[1], a->v[2], a->len[2], due_ms);
    log_append(id, due_ms, a->v[1], a->len[1], a->v[2], a->len[2]);
    char hex[ID_HEX_CHARS + 1];
    snprintf(hex, sizeof hex, "%016" PRIx64, id);
    bytes_bulk(&c->out, hex, ID_HEX_CHARS);
    c->has_send = 1;
    mark_dirty(c);
}

/* Returns 1 when the connection blocks (stop reading its commands). */
static int cmd_pull(conn_t *c, const args_t *a, uint64_t now_ms)
{
    long count = 1, block_ms = -1;
    if (a->n < 3) {
        reply_error(c, "PULL needs a group and a topic: PULL group topic [COUNT n] [BLOCK ms]");
        return 0;
    }
    for (int i = 3; i < a->n; i += 2) {
        int is_count = arg_is(a, i, "COUNT"), is_block = arg_is(a, i, "BLOCK");
        if (!is_count && !is_block) {
            reply_error(c, "PULL option '%.*s' is not served by the floor (COUNT, BLOCK)", (int)a->len[i], a->v[i]);
            return 0;
        }
        if (i + 1 >= a->n) {
            reply_error(c, "PULL %s needs a value", is_count ? "COUNT" : "BLOCK");
            return 0;
        }
        if (is_count && parse_long(a->v[i + 1], a->len[i + 1], 100000, &count) != 0) {
            reply_error(c, "PULL COUNT '%.*s' is not a number from 1 to 100000", (int)a->len[i + 1], a->v[i + 1]);
            return 0;
        }
        if (is_count && count < 1) {
            reply_error(c, "PULL COUNT 0: the count must be at least 1");
            return 0;
        }
        if (is_block) {
            uint64_t ms;
            char err[200];
            if (units_parse_duration(a->v[i + 1], a->len[i + 1], UNITS_BARE_MS, &ms, err, sizeof err) != 0) {
                reply_error(c, "PULL BLOCK: %s", err);
                return 0;
            }
            block_ms = (long)ms;
        }
    }
    if (store_due(now_ms) || block_ms <= 0) {
        reply_messages(c, count, now_ms);
        return 0;
    }
    c->blocked = 1;
    c->block_until_ms = now_ms + (uint64_t)block_ms;
    c->block_count = count;
    c->next_blocked = blocked_list;
    blocked_list = c;
    conn_watch(c);
    return 1;
}

static void cmd_ack(conn_t *c, const args_t *a)
{
    if (a->n < 3) {
        reply_error(c, "ACK needs a group and at least one id: ACK group id [id ...]");
        return;
    }
    long released = 0;
    for (int i = 2; i < a->n; i++) {
        uint64_t id = 0;
        size_t n = a->len[i];
        int ok = n > 0 && n <= ID_HEX_CHARS;
        for (size_t k = 0; ok && k < n; k++) {
            char ch = a->v[i][k];
            int d = (ch >= '0' && ch <= '9') ? ch - '0' : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10 : -1;
            ok = d >= 0;
            id = id * 16 + (uint64_t)d;
        }
        if (!ok) {
            reply_error(c, "ACK: '%.*s' is not a message id (1 to 16 lower-case hex digits)", (int)n, a->v[i]);
            return;
        }
        released += store_ack(id);
    }
    bytes_printf(&c->out, ":%ld\r\n", released);
    mark_dirty(c);
}

/* INFO: what the bench reads around a run (records, fdatasyncs, their time, CPU). */
static void cmd_info(conn_t *c)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                 (double)ru.ru_stime.tv_usec / 1e6;
    char text[512];
    int n = snprintf(text, sizeof text,
                     "# floor\r\nrecords:%" PRIu64 "\r\nfsyncs:%" PRIu64 "\r\nfsync_total_ms:%.1f\r\n"
                     "pending:%" PRIu64 "\r\nunacked:%" PRIu64 "\r\nused_cpu_secs:%.3f\r\n",
                     wal.records, wal.syncs, (double)wal.sync_us / 1000, store.next_id - store.next_deliver,
                     store.next_deliver - store.base, cpu);
    bytes_bulk(&c->out, text, (size_t)n);
    mark_dirty(c);
}

/* Run one command; 1 when the connection now blocks. */
static int dispatch(conn_t *c, const args_t *a, uint64_t now_ms)
{
    if (arg_is(a, 0, "SEND")) {
        cmd_send(c, a, now_ms);
    } else if (arg_is(a, 0, "PULL")) {
        return cmd_pull(c, a, now_ms);
    } else if (arg_is(a, 0, "ACK")) {
        cmd_ack(c, a);
    } else if (arg_is(a, 0, "PING")) {
        bytes_add(&c->out, "+PONG\r\n", 7);
        mark_dirty(c);
    } else if (arg_is(a, 0, "INFO")) {
        cmd_info(c);
    } else if (arg_is(a, 0, "FLUSHALL")) {
        store_flush();
        bytes_add(&c->out, "+OK\r\n", 5);
        mark_dirty(c);
    } else {
        reply_error(c, "unknown command '%.*s' (the floor serves SEND, PULL, ACK, PING, INFO, FLUSHALL)",
                    (int)(a->len[0] > 64 ? 64 : a->len[0]), a->v[0]);
    }
    return 0;
}

/* Read "<prefix><number>\r\n" at p; returns the bytes taken, 0 when incomplete, -1 when malformed. */
static long parse_header(const char *p, size_t avail, char prefix, long max, long *value)
{
    if (avail < 1)
        return 0;
    if (p[0] != prefix)
        return -1;
    const char *cr = memchr(p, '\r', avail);
    if (cr == NULL)
        return avail > 24 ? -1 : 0;
    if ((size_t)(cr - p) + 2 > avail)
        return 0;
    if (cr[1] != '\n' || parse_long(p + 1, (size_t)(cr - p - 1), max, value) != 0)
        return -1;
    return (long)(cr - p) + 2;
}

/* Run the complete commands in c->in until it blocks; -1 on a protocol error (reply written, close). */
static int run_input(conn_t *c, uint64_t now_ms)
{
    static args_t a;
    size_t off = 0;
    while (!c->blocked && off < c->in.len) {
        const char *p = c->in.p + off;
        size_t avail = c->in.len - off, used;
        long argc;
        long h = parse_header(p, avail, '*', MAX_ARGS, &argc);
        if (h == 0)
            break;
        if (h < 0 || argc < 1) {
            reply_error(c, "protocol: expected an array of 1 to %d bulk strings ('*N'), got byte 0x%02x", MAX_ARGS,
                        (unsigned char)p[0]);
            return -1;
        }
        used = (size_t)h;
        int complete = 1;
        a.n = (int)argc;
        for (long i = 0; i < argc; i++) {
            long len;
            long hb = parse_header(p + used, avail - used, '$', MAX_BULK, &len);
            if (hb == 0 || (hb > 0 && used + (size_t)hb + (size_t)len + 2 > avail)) {
                complete = 0;
                break;
            }
            if (hb < 0 || p[used + (size_t)hb + (size_t)len] != '\r' ||
                p[used + (size_t)hb + (size_t)len + 1] != '\n') {
                reply_error(c, "protocol: argument %ld is not a bulk string ('$LEN' of at most %ld bytes)", i + 1,
                            MAX_BULK);
                return -1;
            }
            a.v[i] = p + used + hb;
            a.len[i] = (size_t)len;
            used += (size_t)hb + (size_t)len + 2;
        }
        if (!complete)
            break;
        off += used;
        dispatch(c, &a, now_ms);
    }
    memmove(c->in.p, c->in.p + off, c->in.len - off);
    c->in.len -= off;
    return 0;
}

static void conn_close(conn_t *c)
{
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    for (conn_t **pp = &blocked_list; c->blocked && *pp != NULL; pp = &(*pp)->next_blocked)
        if (*pp == c) {
            *pp = c->next_blocked;
            c->blocked = 0;
            break;
        }
    c->next_closed = closed_list;
    closed_list = c;
}

/* Free the connections closed in this pass (flush_dirty has dropped them from the dirty list). */
static void free_closed(void)
{
    while (closed_list != NULL) {
        conn_t *c = closed_list;
        closed_list = c->next_closed;
        free(c->in.p);
        free(c->out.p);
        free(c);
    }
}

/* Write what c->out holds; register for EPOLLOUT when the socket is full. */
static void conn_write(conn_t *c)
{
    while (c->out_off < c->out.len) {
        ssize_t n = write(c->fd, c->out.p + c->out_off, c->out.len - c->out_off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            conn_close(c);
            return;
        }
        c->out_off += (size_t)n;
    }
    int pending = c->out_off < c->out.len;
    if (!pending) {
        c->out.len = c->out_off = 0;
        if (c->closing) {
            conn_close(c);
            return;
        }
    }
    if (pending != c->want_write) {
        c->want_write = pending;
        conn_watch(c);
    }
}

static void conn_read(conn_t *c, uint64_t now_ms)
{
    for (;;) {
        bytes_reserve(&c->in, READ_CHUNK);
        size_t room = c->in.cap - c->in.len;
        ssize_t n = read(c->fd, c->in.p + c->in.len, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            conn_close(c);
            return;
        }
        c->in.len += (size_t)n;
        if ((size_t)n < room)
            break; /* the socket is drained */
    }
    if (run_input(c, now_ms) != 0)
        c->closing = 1;
}

/* Serve parked PULLs that something is due for, or whose time is up; then the
 * commands queued behind them. Returns the epoll timeout until the next one. */
static int serve_blocked(uint64_t now_ms)
{
    long timeout = -1;
    for (conn_t **pp = &blocked_list; *pp != NULL;) {
        conn_t *c = *pp;
        if (c->fd >= 0 && !store_due(now_ms) && c->block_until_ms > now_ms) {
            long wait = (long)(c->block_until_ms - now_ms);
            if (store.next_deliver < store.next_id) {
                uint64_t due = (*slot_of(store.next_deliver))->due_ms;
                if ((long)(due - now_ms) < wait)
                    wait = (long)(due - now_ms);
            }
            if (timeout < 0 || wait < timeout)
                timeout = wait;
            pp = &c->next_blocked;
            continue;
        }
        *pp = c->next_blocked;
        c->blocked = 0;
        if (c->fd < 0)
            continue;
        conn_watch(c);
        reply_messages(c, c->block_count, now_ms);
        if (run_input(c, now_ms) != 0)
            c->closing = 1;
        if (c->blocked) /* parked again: it was put at the list's head */
            pp = &blocked_list;
    }
    return (int)timeout;
}

/* Write the dirty connections' replies: those without a SEND reply at once
 * (sends == 0), the rest after the pass's fdatasync (sends == 1). */
static void flush_dirty(int sends)
{
    for (conn_t **pp = &dirty_list; *pp != NULL;) {
        conn_t *c = *pp;
        if (c->fd >= 0 && c->has_send != sends) {
            pp = &c->next_dirty;
            continue;
        }
        *pp = c->next_dirty;
        c->dirty = 0;
        c->has_send = 0;
        if (c->fd >= 0)
            conn_write(c);
    }
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 128) != 0)
        die("listen on 127.0.0.1:%d: %s", port, strerror(errno));
    return fd;
}

static void accept_all(int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn_t *c = calloc(1, sizeof *c);
        if (c == NULL)
            die("out of memory (a connection)");
        c->fd = fd;
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
        epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROGRAM " --port PORT --dir DIR [--log-mib N | --grow]\n"
               "  the least a durable delay broker does for hourglass-bench's mixed workload (a bound, not a\n"
               "  product): SEND records appended to DIR/floor.log (N MiB, written in full first; default 256),\n"
               "  one fdatasync per event-loop pass before the SEND replies, PULL/ACK from memory.\n"
               "  --grow: the log is not pre-written but appended to (every fdatasync also commits its size,\n"
               "  as a growing log's does), to show what the pre-writing is worth.\n");
}

int main(int argc, char **argv)
{
    int port = 0;
    long log_mib = 256;
    int grow = 0;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--grow") == 0) {
            grow = 1;
        } else if (v == NULL) {
            usage(stderr);
            die("%s needs a value", a);
        } else if (strcmp(a, "--port") == 0) {
            long p;
            if (parse_long(v, strlen(v), 65535, &p) != 0 || p < 1)
                die("--port '%s' is not a port from 1 to 65535", v);
            port = (int)p, i++;
        } else if (strcmp(a, "--dir") == 0) {
            dir = v, i++;
        } else if (strcmp(a, "--log-mib") == 0) {
            if (parse_long(v, strlen(v), 1L << 20, &log_mib) != 0 || log_mib < 1)
                die("--log-mib '%s' is not a size in MiB from 1 to 1048576", v);
            i++;
        } else {
            usage(stderr);
            die("unknown argument '%s'", a);
        }
    }
    if (port == 0 || dir == NULL) {
        usage(stderr);
        die("--port and --dir are required");
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = on_stop_signal }; /* no SA_RESTART: epoll_wait returns EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    log_open(dir, log_mib, grow);
    int lfd = listen_on(port);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
    epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev);
    if (grow)
        fprintf(stderr, PROGRAM ": listening on 127.0.0.1:%d, log %s/floor.log (growing)\n", port, dir);
    else
        fprintf(stderr, PROGRAM ": listening on 127.0.0.1:%d, log %s/floor.log (%ld MiB, pre-written)\n", port, dir,
                log_mib);

    int timeout = -1;
    while (!stopping) {
        struct epoll_event ev[MAX_EVENTS];
        int n = epoll_wait(epfd, ev, MAX_EVENTS, timeout);
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        if (n < 0)
            n = 0;
        uint64_t now_ms = clock_wall_ms();
        for (int i = 0; i < n; i++) {
            conn_t *c = ev[i].data.ptr;
            if (c == NULL) {
                accept_all(lfd);
                continue;
            }
            if (c->fd >= 0 && (ev[i].events & EPOLLOUT))
                conn_write(c);
            if (c->fd >= 0 && !c->blocked && !c->closing && (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                conn_read(c, now_ms);
        }
        timeout = serve_blocked(now_ms);
        flush_dirty(0);
        if (log_commit())
            flush_dirty(1);
        free_closed();
    }
    fprintf(stderr, PROGRAM ": stopping: %" PRIu64 " records, %" PRIu64 " fdatasyncs (%.1f ms in all)\n", wal.records,
            wal.syncs, (double)wal.sync_us / 1000);
    return 0;
}
