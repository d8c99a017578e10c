/*
 * bench/levels_bench.c — levels-bench: what the level engine (levels/store.h)
 * costs, printed next to what raw LevelDB does on the same disk in the same run.
 *
 * It prints figures and never fails on slowness (CONTRIBUTING.md, "Benchmarks"): the exit
 * status is non-zero only when something is broken (a store call fails, a count
 * comes out wrong). Usage: levels-bench [--dir PATH] [--quick] [--only PART]
 * [--lease-write-delay MS] (the store's lease_write_delay_ms: 0, the store's
 * default, writes every lease at once; the broker's default is 100, and then
 * the pipeline's leases, all taken and acknowledged within one instant of the
 * injected clock, are never written).
 *
 * The parts:
 *   raw       the limit: leveldb_write of batches of 1, 64 and 1024 puts of
 *             100-byte values under 18-byte level-queue keys, sync on and off,
 *             for 1 s each on a fresh LevelDB with the store's options. Plus
 *             batches of 1024 for 4 s, rated over the last 2 s: the sustained
 *             rate once level-0 compaction paces writers; and the same
 *             records appended to one file for 4 s (fdatasync per 1024): the
 *             limit of an append-only commit log on the same disk.
 *   pipeline  one message's life in the broker's write pattern: N store_send
 *             at LEVEL 1 committed every B, the injected clock moved past the
 *             due time, store_move_due in chunks of B, store_lease of B per call
 *             for one group, store_ack of those ids; a commit after every chunk.
 *             N is about 50 ms of raw writes (at most 50 000), so a cycle stays
 *             in the regime the 1 s raw figure is measured in; cycles repeat on
 *             fresh stores for about a second and the medians are printed. Each
 *             stage's msgs/s is compared with raw puts/s at the same B and sync
 *             mode (target: at least half). A cycle writes four batches per
 *             message, so its limit is raw/4.
 *   seek      the queue-on-LSM traps (DESIGN §2), in microseconds, medians of
 *             101 spread over a second: moving the next head of level 1 after 10 pops and after
 *             10^6 (the store seeks to a remembered head, so the same); a raw
 *             seek to the start of the level range, which steps over every
 *             deleted head (what a naive head costs), and store_open on that
 *             store; moving the only message off level 1 while level 2 has
 *             10^5 popped heads (stepping past a level's end walks the next
 *             range's deleted keys); the next lease deadline with nothing
 *             leased after 10^6 leases were acked.
 *   open      10^7 messages pending on LEVEL 18; close; open in a fresh process
 *             (so RSS is the open's, not this process's history): open time
 *             (target < 1 s: open must not scan), RSS after open (target
 *             < 100 MiB), and the level depth read back from the counters.
 *   spread    steady-ms in the store: 10 SENDs per millisecond of the injected
 *             clock with DELAY random 1..9999 ms, the due heads moved, one
 *             (then two) groups leasing COUNT 100 and ACKing every tick; after
 *             10 s of the clock the next 10 s are timed: µs per delivery and
 *             store_ack's share. Deterministic (fixed seed), so callgrind's
 *             instruction counts compare runs.
 *   cycle     a message's whole life in the store, steady: 200 000 messages
 *             (20 000 with --quick) in rounds of 1 024 SENDs at LEVEL 1, the
 *             injected clock 50 ms on per round; each round moves what is due,
 *             leases it for one group, ACKs it and runs the topic-log GC
 *             (store_collect), a commit after each step, sync off. Prints
 *             msgs/s and µs per message; deterministic, so
 *             `valgrind --tool=callgrind levels-bench --only cycle
 *             --lease-write-delay 100` counts the instructions of a message's
 *             life as the broker writes it (docs/BENCH-broker.md).
 *   clogcold  appends of 14 464 bytes into a recycled commit-log segment
 *             (64 MiB; 16 with --quick) whose pages are cached, evicted
 *             (POSIX_FADV_DONTNEED), or evicted and read back by the log's
 *             pre-writer thread before the switch: us an append and the
 *             disk bytes read (/proc/self/io).
 *   redo      the commit log's replay at open (levels/clog_redo.h): 64 MiB
 *             of log (8 with --quick) in the flood's shape, synced and never
 *             applied, reopened as after a kill -9; beside a raw pread of the
 *             same bytes and a pread + CRC-32C of them, in the same run.
 *   lane      the remainder lane (levels/lane.h): push + pop pairs at 440 000
 *             live entries beside 1 000, and the load at open of a 440 000-
 *             entry lane CQ beside cq_read of the same window and a read()
 *             of the file (part_lane says how to count instructions).
 *   msg       the message codec: encode + decode of a 64-byte-payload
 *             message in the commit log's record form (levels/msg.h) beside
 *             today's msg_encode + msg_decode, same run (part_msg says how to
 *             count instructions).
 *   overlay   a LevelDB write carried by the commit log's redo (derived
 *             record, readers' overlay, apply) beside the same writes into a
 *             plain leveldb_writebatch_t, same run: ns per write outside the
 *             fdatasyncs (part_overlay says how to count instructions).
 *
 * The figures are wall-clock time (CLOCK_MONOTONIC) around the calls named, on
 * a store with default options except sync. Every case gets its own LevelDB
 * directory under --dir (default: a mkdtemp under $TMPDIR or /tmp, removed at
 * exit, also after an error; a given --dir is kept, and a case refuses to
 * reuse an existing directory).
 * Message times use an injected clock (a plain variable passed as now_ms), so
 * nothing waits for real time to pass.
 *
 * Single-threaded but for the commit log's pre-writer thread (clogcold's
 * read-back); the open probe runs as a child process (/proc/self/exe
 * --probe-open DIR).
 */
#define _GNU_SOURCE /* nftw's FTW_DEPTH/FTW_PHYS */
#include "levels/store.h"
#include "levels/clog.h"
#include "levels/clog_redo.h"
#include "levels/keys.h"
#include "levels/cq.h"
#include "levels/lane.h"
#include "levels/slot.h"
#include "base/alloc.h"
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <leveldb/c.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BENCH_T0_MS             UINT64_C(1700000000000) /* the injected clock's start */
#define BENCH_TOPIC             "bench"
#define BENCH_GROUP             "bench-group"
#define BENCH_PAYLOAD           64
#define BENCH_RAW_VALUE         100
#define BENCH_RAW_KEY           18 /* 'L' level(u8) due(u64) seq(u64), like the store's */
#define BENCH_LEASE_MS          60000
#define BENCH_MAX_PIPELINE      50000L /* messages per pipeline cycle, at most */
#define BENCH_MAX_CYCLES        64
#define BENCH_SEEK_REPS         101
#define BENCH_NAIVE_REPS        5
#define BENCH_OPEN_PROBES       3
#define BENCH_OPEN_LEVEL        18
#define BENCH_SPREAD_PER_MS     10    /* spread: SENDs per millisecond of the injected clock (10 000/s) */
#define BENCH_SPREAD_COUNT      100   /* spread: a PULL's COUNT */
#define BENCH_SPREAD_MEASURE_MS 10000 /* spread: the timed stretch of the clock */

static const int bench_batches[] = { 1, 64, 1024 };
#define BENCH_N_BATCHES ((int)(sizeof bench_batches / sizeof bench_batches[0]))

typedef struct bench {
    int quick;
    const char *only;                    /* NULL: every part */
    char *dir;                           /* where the case directories go */
    int dir_is_temp;                     /* 1: created by us, removed at the end */
    const char *self;                    /* argv[0], for the probe's argv */
    double raw_rate[BENCH_N_BATCHES][2]; /* puts/s by batch index and sync; 0 = not measured */
    int failures;                        /* targets missed (reported, never fatal) */
} bench_t;

/* ---- small helpers ---------------------------------------------------------- */

static char *bench_temp_dir; /* the mkdtemp to remove at exit, error or not; NULL with --dir */
/* --lease-write-delay: every store is opened with it */
static uint64_t bench_lease_write_delay_ms;
/* every store's commit-log segment size: the default, 16 MiB with --quick (less to pre-write; at least the
 * largest batch, STORE_BATCH_MAX_BYTES plus a payload) */
static uint64_t bench_segment_bytes = STORE_DEFAULT_SEGMENT_BYTES;

static void bench_rm_tree(const char *path);

static void bench_remove_temp(void)
{
    if (bench_temp_dir != NULL) {
        bench_rm_tree(bench_temp_dir);
    }
}

static void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void bench_die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("levels-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void bench_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bench_progress(const char *fmt, ...)
{
    va_list ap;
    fputs("  .. ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Seconds on the monotonic clock. */
static double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A field of /proc/self/status in KiB ("VmRSS", "VmHWM"); -1 when unreadable. */
static long bench_status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL) {
        return -1;
    }
    char line[256];
    long kib = -1;
    size_t flen = strlen(field);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            kib = strtol(line + flen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kib;
}

static uint64_t bench_dir_bytes_total;

static int bench_du_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path;
    (void)flag;
    (void)ftw;
    bench_dir_bytes_total += (uint64_t)st->st_blocks * 512;
    return 0;
}

/* Disk usage of a directory tree in bytes (like du). */
static uint64_t bench_dir_bytes(const char *path)
{
    bench_dir_bytes_total = 0;
    nftw(path, bench_du_one, 16, FTW_PHYS);
    return bench_dir_bytes_total;
}

static int bench_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP) {
        return rmdir(path);
    }
    return unlink(path);
}

static void bench_rm_tree(const char *path)
{
    if (nftw(path, bench_rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT) {
        fprintf(stderr, "levels-bench: could not remove %s: %s\n", path, strerror(errno));
    }
}

/* A fresh directory path for one case under b->dir; refuses to reuse one. The
 * caller frees the result. */
static char *bench_case_dir(const bench_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *bench_case_dir(const bench_t *b, const char *fmt, ...)
{
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    size_t n = strlen(b->dir) + 1 + strlen(name) + 1;
    char *path = xmalloc(n);
    snprintf(path, n, "%s/%s", b->dir, name);
    struct stat st;
    if (stat(path, &st) == 0) {
        bench_die("%s already exists; give an empty --dir (cases never reuse a directory)", path);
    }
    return path;
}

/* Done with a case directory: removed when the whole --dir is ours. */
static void bench_case_done(const bench_t *b, char *path)
{
    if (b->dir_is_temp) {
        bench_rm_tree(path);
    }
    free(path);
}

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[n] (sorts v). */
static double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Deterministic filler so snappy cannot shrink values to nothing (real
 * payloads — order ids, JSON — compress a little, not 100x). */
static void bench_fill(char *buf, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (char)('!' + x % 94);
    }
}

/* ---- the table ---------------------------------------------------------------- */

#define BENCH_ROW_FMT "%-9s %-46s %12s %-7s %-32s %s\n"

static void bench_header(void)
{
    printf(BENCH_ROW_FMT, "part", "case", "figure", "unit", "limit/target", "ratio");
    printf(BENCH_ROW_FMT, "---------", "----------------------------------------------", "------------", "-------",
           "--------------------------------", "-----------");
    fflush(stdout);
}

/* One row. figure is printed with `decimals`; limit is free text (may be
 * empty); ratio < 0 prints nothing; verdict (may be NULL) follows the ratio. */
static void bench_row(const char *part, const char *name, double figure, int decimals, const char *unit,
                      const char *limit, double ratio, const char *verdict)
{
    char fig[32], rat[48];
    snprintf(fig, sizeof fig, "%.*f", decimals, figure);
    if (ratio >= 0) {
        snprintf(rat, sizeof rat, "%.2f%s%s", ratio, verdict ? " " : "", verdict ? verdict : "");
    } else {
        snprintf(rat, sizeof rat, "%s", verdict ? verdict : "");
    }
    printf(BENCH_ROW_FMT, part, name, fig, unit, limit ? limit : "", rat);
    fflush(stdout);
}

/* "ok" or "MISSED" (and count the miss). */
static const char *bench_verdict(bench_t *b, int ok)
{
    if (!ok) {
        b->failures++;
    }
    return ok ? "ok" : "MISSED";
}

/* ---- raw LevelDB ---------------------------------------------------------------- */

typedef struct raw_db {
    leveldb_t *db;
    leveldb_options_t *opt;
    leveldb_cache_t *cache;
    leveldb_readoptions_t *ropt;
    leveldb_writeoptions_t *wopt;
} raw_db_t;

/* Open a LevelDB with the store's default options (store_options_default):
 * same cache, write buffer, table cache, compression and paranoid checks, so
 * the raw figures are the store's ceiling on this disk. */
static void raw_open(raw_db_t *r, const char *path, int create, int sync)
{
    store_options_t so;
    store_options_default(&so);
    r->opt = leveldb_options_create();
    r->cache = leveldb_cache_create_lru(so.cache_bytes);
    leveldb_options_set_cache(r->opt, r->cache);
    leveldb_options_set_create_if_missing(r->opt, (unsigned char)create);
    leveldb_options_set_paranoid_checks(r->opt, 1);
    leveldb_options_set_write_buffer_size(r->opt, so.write_buffer_bytes);
    leveldb_options_set_max_open_files(r->opt, so.max_open_files);
    leveldb_options_set_compression(r->opt, leveldb_snappy_compression);
    r->ropt = leveldb_readoptions_create();
    leveldb_readoptions_set_verify_checksums(r->ropt, 1);
    r->wopt = leveldb_writeoptions_create();
    leveldb_writeoptions_set_sync(r->wopt, (unsigned char)sync);
    char *err = NULL;
    r->db = leveldb_open(r->opt, path, &err);
    if (err != NULL) {
        bench_die("leveldb_open %s: %s", path, err);
    }
}

static void raw_close(raw_db_t *r)
{
    leveldb_close(r->db);
    leveldb_options_destroy(r->opt);
    leveldb_cache_destroy(r->cache);
    leveldb_readoptions_destroy(r->ropt);
    leveldb_writeoptions_destroy(r->wopt);
    memset(r, 0, sizeof *r);
}

static void raw_key(char *k, uint64_t due, uint64_t seq)
{
    k[0] = 'L';
    k[1] = 1;
    for (int i = 0; i < 8; i++) {
        k[2 + i] = (char)(due >> (56 - 8 * i));
    }
    for (int i = 0; i < 8; i++) {
        k[10 + i] = (char)(seq >> (56 - 8 * i));
    }
}

/* One raw batch of `batch` puts (keys and values like the store's), written
 * with the db's write options; *seq numbers the keys. Dies on a write error. */
static void raw_write_batch(raw_db_t *r, leveldb_writebatch_t *wb, int batch, uint64_t *seq)
{
    char key[BENCH_RAW_KEY], val[BENCH_RAW_VALUE];
    for (int i = 0; i < batch; i++) {
        raw_key(key, BENCH_T0_MS + 1000, ++*seq);
        bench_fill(val, sizeof val, *seq);
        leveldb_writebatch_put(wb, key, sizeof key, val, sizeof val);
    }
    char *err = NULL;
    leveldb_write(r->db, r->wopt, wb, &err);
    if (err != NULL) {
        bench_die("raw leveldb_write: %s", err);
    }
    leveldb_writebatch_clear(wb);
}

/* Measure raw puts/s for (batch index bi, sync); cached; prints its row. */
static double raw_rate(bench_t *b, int bi, int sync)
{
    if (b->raw_rate[bi][sync] > 0) {
        return b->raw_rate[bi][sync];
    }
    int batch = bench_batches[bi];
    double budget = b->quick ? 0.15 : 1.0;
    char *path = bench_case_dir(b, "raw-b%d-%s", batch, sync ? "sync" : "nosync");
    raw_db_t r;
    raw_open(&r, path, 1, sync);
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    uint64_t seq = 0;
    long puts = 0;
    double t0 = bench_now(), t1;
    do {
        raw_write_batch(&r, wb, batch, &seq);
        puts += batch;
        t1 = bench_now();
    } while (t1 - t0 < budget);
    leveldb_writebatch_destroy(wb);
    raw_close(&r);
    bench_case_done(b, path);
    double rate = (double)puts / (t1 - t0);
    b->raw_rate[bi][sync] = rate;
    char name[64];
    snprintf(name, sizeof name, "batch %d, sync %s", batch, sync ? "on" : "off");
    bench_row("raw", name, rate, 0, "puts/s", "the limit", -1, NULL);
    return rate;
}

/* Calls write_batch(ctx), each call writing `batch` records, for `seconds`;
 * returns the records per second over the second half (once compaction or
 * writeback paces the writer). */
static double second_half_rate(double seconds, int batch, void (*write_batch)(void *ctx), void *ctx)
{
    long records = 0, records_at_half = -1;
    double t0 = bench_now(), t_half = 0, t;
    do {
        write_batch(ctx);
        records += batch;
        t = bench_now();
        if (records_at_half < 0 && t - t0 >= seconds / 2) {
            records_at_half = records;
            t_half = t;
        }
    } while (t - t0 < seconds);
    return (double)(records - records_at_half) / (t - t_half);
}

#define SUSTAINED_BATCH 1024

typedef struct raw_batch_ctx {
    raw_db_t *r;
    leveldb_writebatch_t *wb;
    uint64_t seq;
} raw_batch_ctx_t;

static void raw_batch_cb(void *arg)
{
    raw_batch_ctx_t *x = arg;
    raw_write_batch(x->r, x->wb, SUSTAINED_BATCH, &x->seq);
}

/* The limit under sustained load: batches of 1024 for `seconds` (4, and 16:
 * a flood's length), the rate over the second half, once level-0 compaction
 * paces the writes (LevelDB slows and then
 * stops writers while compaction is behind). The bursts above, and the
 * pipeline cycles, stay under that point. */
static void raw_sustained(bench_t *b, int sync, double seconds)
{
    char *path = bench_case_dir(b, "raw-sustained-%s-%.0f", sync ? "sync" : "nosync", seconds);
    raw_db_t r;
    raw_open(&r, path, 1, sync);
    raw_batch_ctx_t x = { &r, leveldb_writebatch_create(), 0 };
    double rate = second_half_rate(seconds, SUSTAINED_BATCH, raw_batch_cb, &x);
    leveldb_writebatch_destroy(x.wb);
    raw_close(&r);
    bench_case_done(b, path);
    char name[64];
    snprintf(name, sizeof name, "batch %d, sync %s, sustained (%.0f-%.0f s)", SUSTAINED_BATCH, sync ? "on" : "off",
             seconds / 2, seconds);
    bench_row("raw", name, rate, 0, "puts/s", "under compaction", -1, NULL);
}

enum {
    LOG_RECORD = 4 + BENCH_RAW_KEY + BENCH_RAW_VALUE
};

typedef struct log_batch_ctx {
    int fd, sync;
    const char *file;
    char *buf; /* SUSTAINED_BATCH records of LOG_RECORD bytes */
    uint64_t seq;
} log_batch_ctx_t;

static void log_batch_cb(void *arg)
{
    log_batch_ctx_t *x = arg;
    size_t len = (size_t)SUSTAINED_BATCH * LOG_RECORD;
    for (int i = 0; i < SUSTAINED_BATCH; i++) {
        char *r = x->buf + (size_t)i * LOG_RECORD;
        r[0] = r[1] = 0;
        r[2] = (char)(LOG_RECORD >> 8);
        r[3] = (char)LOG_RECORD;
        raw_key(r + 4, BENCH_T0_MS + 1000, ++x->seq);
        bench_fill(r + 4 + BENCH_RAW_KEY, BENCH_RAW_VALUE, x->seq);
    }
    if (write(x->fd, x->buf, len) != (ssize_t)len || (x->sync && fdatasync(x->fd) != 0)) {
        bench_die("append to %s: %s", x->file, strerror(errno));
    }
}

/* The limit of another layout, beside LevelDB's: the same records (key,
 * value, a 4-byte length) appended to one file in batches of 1024, one
 * write(2) and (sync on) one fdatasync per batch, for `seconds`, rated over
 * the second half as raw_sustained is. This is what an append-only commit log
 * (RocketMQ's layout: every SEND appended once, the queues built from it
 * later) would take in on this disk before any queue work: a ceiling for
 * the SEND leg, not a figure of the store. */
static void log_sustained(bench_t *b, int sync, double seconds)
{
    char *path = bench_case_dir(b, "log-sustained-%s-%.0f", sync ? "sync" : "nosync", seconds);
    char file[PATH_MAX];
    if (mkdir(path, 0700) != 0) {
        bench_die("mkdir %s: %s", path, strerror(errno));
    }
    snprintf(file, sizeof file, "%s/commit.log", path);
    int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        bench_die("open %s: %s", file, strerror(errno));
    }
    log_batch_ctx_t x = { fd, sync, file, xmalloc((size_t)SUSTAINED_BATCH * LOG_RECORD), 0 };
    double rate = second_half_rate(seconds, SUSTAINED_BATCH, log_batch_cb, &x);
    free(x.buf);
    close(fd);
    bench_case_done(b, path);
    char name[80];
    snprintf(name, sizeof name, "append-only log, batch %d, sync %s, sustained (%.0f-%.0f s)", SUSTAINED_BATCH,
             sync ? "on" : "off", seconds / 2, seconds);
    bench_row("raw", name, rate, 0, "records/s", "another layout's limit", -1, NULL);
}

static void part_raw(bench_t *b)
{
    for (int sync = 1; sync >= 0; sync--) {
        for (int bi = 0; bi < BENCH_N_BATCHES; bi++) {
            raw_rate(b, bi, sync);
        }
    }
    if (!b->quick) {
        raw_sustained(b, 1, 4);
        raw_sustained(b, 0, 4);
        log_sustained(b, 1, 4);
        raw_sustained(b, 1, 16); /* a flood's length (hourglass-bench's mixed part produces for 15 s) */
        log_sustained(b, 1, 16);
    }
}

/* ---- the store ---------------------------------------------------------------- */

static store_t *bench_store_open(const char *path, int sync, int create)
{
    store_options_t o;
    store_options_default(&o);
    o.path = path;
    o.sync = sync;
    o.create_if_missing = create;
    o.lease_write_delay_ms = bench_lease_write_delay_ms;
    o.segment_bytes = bench_segment_bytes;
    store_t *s = NULL;
    char err[512];
    if (store_open(&o, clock_wall_ms(), &s, err, sizeof err) != 0) {
        bench_die("store_open: %s", err);
    }
    return s;
}

static void bench_commit(store_t *s)
{
    char err[512];
    if (store_commit(s, err, sizeof err) != 0) {
        bench_die("store_commit: %s", err);
    }
}

static void bench_close(store_t *s)
{
    char err[512];
    if (store_close(s, err, sizeof err) != 0) {
        bench_die("store_close: %s", err);
    }
}

/* store_send at `level` of one message with a 64-byte payload. */
static void bench_send(store_t *s, int level, uint64_t now_ms, uint64_t n)
{
    char payload[BENCH_PAYLOAD], err[512];
    bench_fill(payload, sizeof payload, n);
    store_send_req_t req = { .topic = BENCH_TOPIC,
                             .topic_len = strlen(BENCH_TOPIC),
                             .payload = payload,
                             .payload_len = sizeof payload,
                             .level = level };
    uint64_t id, due;
    if (store_send(s, &req, now_ms, &id, &due, err, sizeof err) != 0) {
        bench_die("store_send: %s", err);
    }
}

/* BENCH_GROUP on BENCH_TOPIC from its first message, committed. */
static void bench_group_create(store_t *s, uint64_t now_ms)
{
    char err[512];
    if (store_group_create(s, BENCH_GROUP, strlen(BENCH_GROUP), BENCH_TOPIC, strlen(BENCH_TOPIC), 1, -1, now_ms, err,
                           sizeof err) != 0) {
        bench_die("store_group_create: %s", err);
    }
    bench_commit(s);
}

/* Move up to max due heads; returns how many moved. */
static int bench_move(store_t *s, uint64_t now_ms, int max)
{
    char err[512];
    int moved = 0;
    if (store_move_due(s, now_ms, max, &moved, NULL, err, sizeof err) != 0) {
        bench_die("store_move_due: %s", err);
    }
    return moved;
}

/* ---- pipeline ----------------------------------------------------------------- */

typedef struct cycle_secs {
    double stage[4]; /* send, move_due, lease, ack */
} cycle_secs_t;

static const char *const pipeline_stages[4] = { "send", "move_due", "lease", "ack" };

/* Messages per pipeline cycle: about 50 ms of raw writes at this batch size
 * and sync mode, a whole number of batches, at least a few batches, and at
 * most BENCH_MAX_PIPELINE. The cap keeps a cycle (about 5 writes' worth of
 * bytes per message) inside what LevelDB absorbs before its level-0 throttle
 * starts, the same regime the raw limit is measured in; the case repeats the
 * cycle on fresh stores instead (see part_raw for the sustained rate). */
static long pipeline_size(const bench_t *b, double raw, int batch)
{
    long n = (long)(raw * (b->quick ? 0.005 : 0.05));
    long floor_n = b->quick ? 50 : 200;
    long cap = b->quick ? BENCH_MAX_PIPELINE / 5 : BENCH_MAX_PIPELINE;
    if (n < floor_n) {
        n = floor_n;
    }
    if (n < 4L * batch) {
        n = 4L * batch;
    }
    if (n > cap) {
        n = cap;
    }
    return (n + batch - 1) / batch * batch;
}

/* One cycle of n messages on a fresh store: the seconds of each stage. */
static void pipeline_cycle(bench_t *b, int batch, int sync, long n, int rep, cycle_secs_t *out)
{
    char *path = bench_case_dir(b, "pipeline-b%d-%s-%d", batch, sync ? "sync" : "nosync", rep);
    store_t *s = bench_store_open(path, sync, 1);
    char err[512];
    uint64_t clock_ms = BENCH_T0_MS;
    bench_group_create(s, clock_ms);

    /* send */
    double t0 = bench_now();
    for (long i = 0; i < n; i++) {
        bench_send(s, 1, clock_ms, (uint64_t)i);
        if ((i + 1) % batch == 0) {
            bench_commit(s);
        }
    }
    bench_commit(s);
    out->stage[0] = bench_now() - t0;

    /* due move: the injected clock passes level 1's delay */
    clock_ms += 1000 + 1;
    t0 = bench_now();
    long moved = 0;
    while (moved < n) {
        int m = bench_move(s, clock_ms, batch);
        if (m == 0) {
            bench_die("store_move_due moved %ld of %ld due messages", moved, n);
        }
        bench_commit(s);
        moved += m;
    }
    out->stage[1] = bench_now() - t0;

    /* lease */
    uint64_t *ids = xmalloc((size_t)n * sizeof *ids);
    msg_owned_t *msgs = xmalloc((size_t)batch * sizeof *msgs);
    t0 = bench_now();
    long leased = 0;
    while (leased < n) {
        int got = 0;
        if (store_lease(s, BENCH_GROUP, strlen(BENCH_GROUP), BENCH_TOPIC, strlen(BENCH_TOPIC), batch, BENCH_LEASE_MS,
                        clock_ms, msgs, &got, err, sizeof err) != 0) {
            bench_die("store_lease: %s", err);
        }
        if (got == 0) {
            bench_die("store_lease gave %ld of %ld ready messages", leased, n);
        }
        for (int i = 0; i < got; i++) {
            ids[leased + i] = msgs[i].m.id;
            msg_owned_free(&msgs[i]);
        }
        bench_commit(s);
        leased += got;
    }
    out->stage[2] = bench_now() - t0;

    /* ack, in the order leased */
    t0 = bench_now();
    for (long i = 0; i < n; i += batch) {
        int k = n - i < batch ? (int)(n - i) : batch, released = 0;
        if (store_ack(s, BENCH_GROUP, strlen(BENCH_GROUP), ids + i, k, &released, err, sizeof err) != 0) {
            bench_die("store_ack: %s", err);
        }
        if (released != k) {
            bench_die("store_ack released %d of %d leases", released, k);
        }
        bench_commit(s);
    }
    out->stage[3] = bench_now() - t0;

    store_group_info_t gi = { 0 };
    store_level_info_t li = { 0 };
    if (store_group_info(s, BENCH_GROUP, strlen(BENCH_GROUP), &gi) != 1 || gi.inflight != 0 || gi.ready != 0 ||
        store_level_info(s, 1, &li) != 0 || li.depth != 0) {
        bench_die("pipeline left messages behind (inflight %llu, ready %llu, level 1 depth %llu)",
                  (unsigned long long)gi.inflight, (unsigned long long)gi.ready, (unsigned long long)li.depth);
    }
    free(msgs);
    free(ids);
    bench_close(s);
    bench_case_done(b, path);
}

/* A case: cycles on fresh stores until about a second has passed (at least
 * three; one with --quick), then the median rate of each stage and of the
 * whole cycle. */
static void pipeline_case(bench_t *b, int bi, int sync)
{
    int batch = bench_batches[bi];
    double raw = raw_rate(b, bi, sync);
    long n = pipeline_size(b, raw, batch);
    double rate[4][BENCH_MAX_CYCLES], cycle[BENCH_MAX_CYCLES];
    int min_reps = b->quick ? 1 : 3;
    double budget = b->quick ? 0.1 : 1.0, t0 = bench_now();
    int reps = 0;
    while (reps < BENCH_MAX_CYCLES && (reps < min_reps || bench_now() - t0 < budget)) {
        cycle_secs_t c;
        pipeline_cycle(b, batch, sync, n, reps, &c);
        for (int i = 0; i < 4; i++) {
            rate[i][reps] = (double)n / c.stage[i];
        }
        cycle[reps] = (double)n / (c.stage[0] + c.stage[1] + c.stage[2] + c.stage[3]);
        reps++;
    }
    bench_progress("pipeline batch %d sync %s: %d cycles of %ld messages", batch, sync ? "on" : "off", reps, n);

    char name[96], limit[64];
    snprintf(name, sizeof name, "messages per cycle, batch %d, sync %s", batch, sync ? "on" : "off");
    snprintf(limit, sizeof limit, "x %d cycles (medians below)", reps);
    bench_row("pipeline", name, (double)n, 0, "msgs", limit, -1, NULL);
    for (int i = 0; i < 4; i++) {
        double r = bench_median(rate[i], reps);
        snprintf(name, sizeof name, "%s, batch %d, sync %s", pipeline_stages[i], batch, sync ? "on" : "off");
        snprintf(limit, sizeof limit, ">= 0.5 x raw %.0f", raw);
        bench_row("pipeline", name, r, 0, "msgs/s", limit, r / raw, bench_verdict(b, r >= raw / 2));
    }
    double c = bench_median(cycle, reps);
    snprintf(name, sizeof name, "whole cycle, batch %d, sync %s", batch, sync ? "on" : "off");
    snprintf(limit, sizeof limit, ">= 0.5 x raw/4 %.0f", raw / 4);
    bench_row("pipeline", name, c, 0, "msgs/s", limit, c / (raw / 4), bench_verdict(b, c >= raw / 8));
}

static void part_pipeline(bench_t *b)
{
    for (int sync = 1; sync >= 0; sync--) {
        for (int bi = 0; bi < BENCH_N_BATCHES; bi++) {
            pipeline_case(b, bi, sync);
        }
    }
}

/* ---- head seek ------------------------------------------------------------------ */

/* Before each timed repetition: 10 ms (1 ms with --quick), then one untimed
 * run of the same operation. The scheduler moves a head when it comes due, not
 * in a tight loop: spreading the repetitions over a second lets the median
 * show LevelDB's usual state rather than one moment of it (right after a bulk
 * load level 0 holds many files until compaction catches up, and every seek
 * pays for each), and the untimed run warms the caches the pause cooled, so
 * the figure is the operation's cost, not the wake-up's. */
static void seek_pause(const bench_t *b)
{
    struct timespec ts = { 0, b->quick ? 1000000L : 10000000L };
    nanosleep(&ts, NULL);
}

/* Microseconds of one single-message store_move_due (its commit untimed).
 * When fresh_on_level > 0, one message is sent to that level first and the
 * clock passes its delay, so the call moves the level's only message. */
static double seek_move_once(store_t *s, uint64_t *clock_ms, int fresh_on_level, uint64_t n)
{
    if (fresh_on_level > 0) {
        bench_send(s, fresh_on_level, *clock_ms, n);
        bench_commit(s);
        *clock_ms += store_levels(s)->delay_ms[fresh_on_level] + 1;
    }
    double t0 = bench_now();
    int m = bench_move(s, *clock_ms, 1);
    double us = (bench_now() - t0) * 1e6;
    if (m != 1) {
        bench_die("store_move_due moved %d messages, wanted 1", m);
    }
    bench_commit(s);
    return us;
}

/* Median microseconds of BENCH_SEEK_REPS single-message moves (seek_move_once),
 * each after a pause and an untimed move: 2 x BENCH_SEEK_REPS messages. */
static double seek_store_us(const bench_t *b, store_t *s, uint64_t *clock_ms, int fresh_on_level)
{
    double us[BENCH_SEEK_REPS];
    for (int i = 0; i < BENCH_SEEK_REPS; i++) {
        seek_pause(b);
        seek_move_once(s, clock_ms, fresh_on_level, (uint64_t)i);
        us[i] = seek_move_once(s, clock_ms, fresh_on_level, (uint64_t)i);
    }
    return bench_median(us, BENCH_SEEK_REPS);
}

/* Median microseconds to create an iterator and seek to the start of level
 * 1's range on a raw LevelDB (the naive way to find a queue head) after
 * `pops` heads were deleted, `live` keys behind them: a LevelDB of its own in
 * path, filled the way a level kept in LevelDB is (a journey's `L` key per
 * message, deleted as it leaves). The store's own levels no longer hold such
 * keys (format 6: a journey is its consume-queue entry), so this is the
 * baseline the store's head is measured against, not a read of its files. */
static double seek_naive_us(const char *path, long pops, long live)
{
    raw_db_t r;
    raw_open(&r, path, 1, 0);
    char key[BENCH_RAW_KEY], val[BENCH_RAW_VALUE], *e = NULL;
    for (int pass = 0; pass < 2; pass++) { /* 1: every key put; 2: the first `pops` deleted */
        long n = pass == 0 ? pops + live : pops;
        leveldb_writebatch_t *wb = leveldb_writebatch_create();
        for (long i = 0; i < n; i++) {
            raw_key(key, (uint64_t)i, (uint64_t)i);
            if (pass == 0) {
                bench_fill(val, sizeof val, (uint64_t)i);
                leveldb_writebatch_put(wb, key, sizeof key, val, sizeof val);
            } else {
                leveldb_writebatch_delete(wb, key, sizeof key);
            }
            if ((i + 1) % 10000 == 0 || i + 1 == n) {
                leveldb_write(r.db, r.wopt, wb, &e);
                if (e != NULL) {
                    bench_die("raw write in %s: %s", path, e);
                }
                leveldb_writebatch_clear(wb);
            }
        }
        leveldb_writebatch_destroy(wb);
    }
    double us[BENCH_NAIVE_REPS];
    const char start[2] = { 'L', 1 };
    for (int i = 0; i < BENCH_NAIVE_REPS; i++) {
        double t0 = bench_now();
        leveldb_iterator_t *it = leveldb_create_iterator(r.db, r.ropt);
        leveldb_iter_seek(it, start, sizeof start);
        size_t klen = 0;
        const char *k = leveldb_iter_valid(it) ? leveldb_iter_key(it, &klen) : NULL;
        us[i] = (bench_now() - t0) * 1e6;
        if (k == NULL || klen != BENCH_RAW_KEY || k[0] != 'L' || k[1] != 1) {
            bench_die("raw seek found no level-1 head in %s", path);
        }
        leveldb_iter_destroy(it);
    }
    raw_close(&r);
    return bench_median(us, BENCH_NAIVE_REPS);
}

/* Median microseconds of store_next_lease_deadline right after one lease was
 * taken and acked (so nothing is leased), BENCH_SEEK_REPS times. Needs one
 * ready message in the topic log per repetition. */
static double seek_lease_us(const bench_t *b, store_t *s, uint64_t clock_ms)
{
    double us[BENCH_SEEK_REPS];
    char err[512];
    for (int i = 0; i < BENCH_SEEK_REPS; i++) {
        seek_pause(b);
        msg_owned_t m;
        int got = 0, released = 0;
        if (store_lease(s, BENCH_GROUP, strlen(BENCH_GROUP), BENCH_TOPIC, strlen(BENCH_TOPIC), 1, BENCH_LEASE_MS,
                        clock_ms, &m, &got, err, sizeof err) != 0) {
            bench_die("store_lease: %s", err);
        }
        if (got != 1) {
            bench_die("store_lease found no ready message");
        }
        bench_commit(s);
        store_next_lease_deadline(s); /* as the scheduler does after a PULL */
        uint64_t id = m.m.id;
        msg_owned_free(&m);
        if (store_ack(s, BENCH_GROUP, strlen(BENCH_GROUP), &id, 1, &released, err, sizeof err) != 0) {
            bench_die("store_ack: %s", err);
        }
        bench_commit(s);
        double t0 = bench_now();
        uint64_t next = store_next_lease_deadline(s);
        us[i] = (bench_now() - t0) * 1e6;
        if (next != UINT64_MAX) {
            bench_die("a lease is left after the ack");
        }
    }
    return bench_median(us, BENCH_SEEK_REPS);
}

static void part_seek(bench_t *b)
{
    long pops = b->quick ? 20000 : 1000000;
    long pops2 = pops / 10;                             /* popped heads on level 2, for the drain case */
    long total = pops + 10 + 4L * BENCH_SEEK_REPS + 50; /* a live tail stays behind the measured heads */
    char *path = bench_case_dir(b, "seek");
    store_t *s = bench_store_open(path, 0, 1);
    char err[512], name[96], limit[64];
    uint64_t clock_ms = BENCH_T0_MS;

    /* 1. The next head of level 1, after 10 pops and after `pops` pops. */
    bench_progress("seek: sending %ld messages to level 1 (sync off)", total);
    for (long i = 0; i < total; i++) {
        bench_send(s, 1, clock_ms, (uint64_t)i);
        if ((i + 1) % 10000 == 0) {
            bench_commit(s);
        }
    }
    bench_commit(s);
    clock_ms += 1000 + 1;
    long popped = bench_move(s, clock_ms, 10);
    bench_commit(s);
    double fresh = seek_store_us(b, s, &clock_ms, 0);
    popped += 2 * BENCH_SEEK_REPS;
    bench_progress("seek: popping level 1 to %ld", pops);
    while (popped < pops) {
        long want = pops - popped < 10000 ? pops - popped : 10000;
        popped += bench_move(s, clock_ms, (int)want);
        bench_commit(s);
    }
    double worn = seek_store_us(b, s, &clock_ms, 0);
    bench_close(s);
    bench_row("seek", "store_move_due 1 head after 10 pops", fresh, 2, "us", "", -1, NULL);
    snprintf(name, sizeof name, "store_move_due 1 head after %ld pops", pops);
    snprintf(limit, sizeof limit, "~ after 10 pops (%.2f us)", fresh);
    bench_row("seek", name, worn, 2, "us", limit, worn / fresh, bench_verdict(b, worn <= fresh * 3 + 5));

    /* 2. What the popped heads cost a reader that does not remember the head. */
    char naive_path[PATH_MAX];
    snprintf(naive_path, sizeof naive_path, "%s-naive", path);
    double naive = seek_naive_us(naive_path, pops, total - pops);
    snprintf(name, sizeof name, "raw seek to level 1 start after %ld pops", pops);
    bench_row("seek", name, naive, 1, "us", "what a naive head costs", naive / worn, "x store");
    double t0 = bench_now();
    s = bench_store_open(path, 0, 0);
    double open_ms = (bench_now() - t0) * 1e3;
    snprintf(name, sizeof name, "store_open after %ld pops", pops);
    bench_row("seek", name, open_ms, 1, "ms", "< 1000 ms", open_ms / 1000, bench_verdict(b, open_ms < 1000));

    /* 3. Draining a level must not walk the popped heads of the next one. */
    bench_progress("seek: popping %ld heads of level 2, draining level 1", pops2);
    for (long i = 0; i < pops2; i++) {
        bench_send(s, 2, clock_ms, (uint64_t)i);
        if ((i + 1) % 10000 == 0) {
            bench_commit(s);
        }
    }
    bench_send(s, 2, clock_ms + 3600 * 1000, 0); /* level 2's live head, an hour later */
    bench_commit(s);
    clock_ms += 5000 + 1;
    while (bench_move(s, clock_ms, 10000) > 0) {
        bench_commit(s);
    }
    bench_commit(s);
    double drain = seek_store_us(b, s, &clock_ms, 1);
    snprintf(name, sizeof name, "move_due draining level 1, %ld popped on 2", pops2);
    snprintf(limit, sizeof limit, "~ after 10 pops (%.2f us)", fresh);
    bench_row("seek", name, drain, 2, "us", limit, drain / fresh, bench_verdict(b, drain <= fresh * 3 + 5));

    /* 4. The lease range: every message leased and acked, then the next
     * deadline with nothing leased (what the scheduler asks after each ACK). */
    store_topic_info_t ti;
    long ready = store_topic_info(s, BENCH_TOPIC, strlen(BENCH_TOPIC), &ti) == 1 ? (long)ti.appended : 0;
    long to_ack = ready - BENCH_SEEK_REPS;
    bench_progress("seek: leasing and acking %ld messages", to_ack);
    msg_owned_t *msgs = xmalloc(10000 * sizeof *msgs);
    uint64_t *ids = xmalloc(10000 * sizeof *ids);
    for (long done = 0; done < to_ack;) {
        int want = to_ack - done < 10000 ? (int)(to_ack - done) : 10000, got = 0, released = 0;
        if (store_lease(s, BENCH_GROUP, strlen(BENCH_GROUP), BENCH_TOPIC, strlen(BENCH_TOPIC), want, BENCH_LEASE_MS,
                        clock_ms, msgs, &got, err, sizeof err) != 0) {
            bench_die("store_lease: %s", err);
        }
        if (got == 0) {
            bench_die("store_lease found no ready message (%ld of %ld leased)", done, to_ack);
        }
        for (int i = 0; i < got; i++) {
            ids[i] = msgs[i].m.id;
            msg_owned_free(&msgs[i]);
        }
        bench_commit(s);
        if (store_ack(s, BENCH_GROUP, strlen(BENCH_GROUP), ids, got, &released, err, sizeof err) != 0) {
            bench_die("store_ack: %s", err);
        }
        bench_commit(s);
        clock_ms++;
        done += got;
    }
    free(ids);
    free(msgs);
    double lease_us = seek_lease_us(b, s, clock_ms);
    snprintf(name, sizeof name, "next lease deadline after %ld acks", to_ack);
    snprintf(limit, sizeof limit, "~ after 10 pops (%.2f us)", fresh);
    bench_row("seek", name, lease_us, 2, "us", limit, lease_us / fresh, bench_verdict(b, lease_us <= fresh * 3 + 5));

    bench_close(s);
    bench_case_done(b, path);
}

/* ---- open ------------------------------------------------------------------------ */

typedef struct open_probe {
    double open_ms;
    long rss_before_kib, rss_after_kib;
    uint64_t depth;
} open_probe_t;

/* The child side: open path, report "open_ms rss_before rss_after depth" on stdout. */
static int probe_open_main(const char *path)
{
    long before = bench_status_kib("VmRSS");
    double t0 = bench_now();
    store_t *s = bench_store_open(path, 0, 0);
    double ms = (bench_now() - t0) * 1e3;
    long after = bench_status_kib("VmRSS");
    store_level_info_t li;
    if (store_level_info(s, BENCH_OPEN_LEVEL, &li) != 0) {
        bench_die("no level %d", BENCH_OPEN_LEVEL);
    }
    printf("%.3f %ld %ld %llu\n", ms, before, after, (unsigned long long)li.depth);
    fflush(stdout);
    bench_close(s);
    return 0;
}

/* Run the probe in a fresh process (re-executing this program) so its RSS is
 * the open's alone. */
static void open_probe(const bench_t *b, const char *path, open_probe_t *out)
{
    int fd[2];
    if (pipe(fd) != 0) {
        bench_die("pipe: %s", strerror(errno));
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        bench_die("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execl("/proc/self/exe", b->self, "--probe-open", path, (char *)NULL);
        fprintf(stderr, "levels-bench: exec /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    unsigned long long depth = 0;
    int got = f ? fscanf(f, "%lf %ld %ld %llu", &out->open_ms, &out->rss_before_kib, &out->rss_after_kib, &depth) : 0;
    if (f) {
        fclose(f);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != 4 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        bench_die("the open probe failed (status %d)", status);
    }
    out->depth = depth;
}

static void part_open(bench_t *b)
{
    long count = b->quick ? 100000 : 10000000;
    long batch = 10000, report_every = count / 10;
    char *path = bench_case_dir(b, "open");
    store_t *s = bench_store_open(path, 0, 1);
    uint64_t clock_ms = BENCH_T0_MS;
    long peak_rss = bench_status_kib("VmRSS"), start_rss = peak_rss;
    bench_progress("open: filling level %d with %ld messages (sync off, batches of %ld)", BENCH_OPEN_LEVEL, count,
                   batch);
    double t0 = bench_now(), tlast = t0;
    for (long i = 0; i < count; i++) {
        bench_send(s, BENCH_OPEN_LEVEL, clock_ms, (uint64_t)i);
        if ((i + 1) % batch == 0 || i + 1 == count) {
            bench_commit(s);
            clock_ms++; /* time passes between batches, as in the broker */
            long rss = bench_status_kib("VmRSS");
            if (rss > peak_rss) {
                peak_rss = rss;
            }
            if ((i + 1) % report_every == 0) {
                double now = bench_now();
                bench_progress("open: %ld / %ld (%.0f msgs/s lately, RSS %.1f MiB)", i + 1, count,
                               (double)report_every / (now - tlast), rss / 1024.0);
                tlast = now;
            }
        }
    }
    double fill_s = bench_now() - t0;
    t0 = bench_now();
    bench_close(s);
    double close_ms = (bench_now() - t0) * 1e3;
    uint64_t bytes = bench_dir_bytes(path);

    open_probe_t p[BENCH_OPEN_PROBES];
    double open_ms[BENCH_OPEN_PROBES];
    for (int i = 0; i < BENCH_OPEN_PROBES; i++) {
        open_probe(b, path, &p[i]);
        open_ms[i] = p[i].open_ms;
    }
    double first_ms = open_ms[0];
    double med_ms = bench_median(open_ms, BENCH_OPEN_PROBES);
    long rss_after = 0, rss_before = 0;
    int depth_ok = 1;
    for (int i = 0; i < BENCH_OPEN_PROBES; i++) {
        if (p[i].rss_after_kib > rss_after) {
            rss_after = p[i].rss_after_kib;
            rss_before = p[i].rss_before_kib;
        }
        if (p[i].depth != (uint64_t)count) {
            depth_ok = 0;
        }
    }

    char name[96], limit[64];
    snprintf(name, sizeof name, "fill %ld on level %d (batch %ld, sync off)", count, BENCH_OPEN_LEVEL, batch);
    bench_row("open", name, (double)count / fill_s, 0, "msgs/s", "", -1, NULL);
    snprintf(limit, sizeof limit, "(%.1f MiB at start)", start_rss / 1024.0);
    bench_row("open", "peak RSS during the fill", peak_rss / 1024.0, 1, "MiB", limit, -1, NULL);
    bench_row("open", "store_close after the fill", close_ms, 1, "ms", "", -1, NULL);
    bench_row("open", "data directory size (du)", (double)bytes / (1024.0 * 1024.0), 1, "MiB", "", -1, NULL);
    bench_row("open", "store_open, first fresh process", first_ms, 1, "ms", "< 1000 ms", first_ms / 1000,
              bench_verdict(b, first_ms < 1000));
    snprintf(name, sizeof name, "store_open, median of %d processes", BENCH_OPEN_PROBES);
    bench_row("open", name, med_ms, 1, "ms", "< 1000 ms", med_ms / 1000, bench_verdict(b, med_ms < 1000));
    snprintf(limit, sizeof limit, "< 100 MiB (%.1f before open)", rss_before / 1024.0);
    bench_row("open", "RSS after open", rss_after / 1024.0, 1, "MiB", limit, rss_after / 1024.0 / 100,
              bench_verdict(b, rss_after < 100 * 1024));
    snprintf(name, sizeof name, "level %d depth after open", BENCH_OPEN_LEVEL);
    snprintf(limit, sizeof limit, "= %ld", count);
    bench_row("open", name, (double)p[0].depth, 0, "msgs", limit, -1, bench_verdict(b, depth_ok));
    bench_case_done(b, path);
}

/* ---- spread --------------------------------------------------------------------- */

/* One group's share of a spread tick: lease what is ready (COUNT
 * BENCH_SPREAD_COUNT, as the bench's consumers PULL), commit, ACK those ids
 * (in the order leased), commit; the seconds spent in store_ack go to *ack_s.
 * Returns the messages acked. */
static long spread_consume(store_t *s, const char *group, uint64_t now_ms, msg_owned_t *msgs, uint64_t *ids,
                           double *ack_s)
{
    char err[512];
    long acked = 0;
    for (;;) {
        int got = 0;
        if (store_lease(s, group, strlen(group), BENCH_TOPIC, strlen(BENCH_TOPIC), BENCH_SPREAD_COUNT, BENCH_LEASE_MS,
                        now_ms, msgs, &got, err, sizeof err) != 0) {
            bench_die("store_lease: %s", err);
        }
        if (got == 0) {
            return acked;
        }
        for (int i = 0; i < got; i++) {
            ids[i] = msgs[i].m.id;
            msg_owned_free(&msgs[i]);
        }
        bench_commit(s);
        int released = 0;
        double t0 = bench_now();
        if (store_ack(s, group, strlen(group), ids, got, &released, err, sizeof err) != 0) {
            bench_die("store_ack: %s", err);
        }
        bench_commit(s);
        *ack_s += bench_now() - t0;
        if (released != got) {
            bench_die("store_ack released %d of %d leases", released, got);
        }
        acked += got;
    }
}

/* steady-ms in the store, on the injected clock: every millisecond
 * BENCH_SPREAD_PER_MS SENDs with DELAY random 1..9999 ms (a fixed seed) are
 * committed, the due heads moved, and each of `groups` groups leases what is
 * ready and ACKs it. Ids fall due out of id order, so an ACK's neighbours in
 * any index keyed by id were mostly deleted already: the case that made an
 * ACK walk tombstones. The first 10 s of the clock fill the levels; the next
 * BENCH_SPREAD_MEASURE_MS are timed. Prints the whole loop's µs per message
 * delivered and store_ack's share. Sync off, as the broker writes moves,
 * leases and ACKs. */
static void spread_case(bench_t *b, int groups)
{
    char *path = bench_case_dir(b, "spread-%d", groups);
    store_t *s = bench_store_open(path, 0, 1);
    char err[512];
    uint64_t clock_ms = BENCH_T0_MS;
    static const char *const names[2] = { "spread-a", "spread-b" };
    for (int g = 0; g < groups; g++) {
        if (store_group_create(s, names[g], strlen(names[g]), BENCH_TOPIC, strlen(BENCH_TOPIC), 1, -1, clock_ms, err,
                               sizeof err) != 0) {
            bench_die("store_group_create: %s", err);
        }
    }
    bench_commit(s);
    msg_owned_t *msgs = xmalloc(BENCH_SPREAD_COUNT * sizeof *msgs);
    uint64_t ids[BENCH_SPREAD_COUNT];
    uint64_t rng = 42, n = 0;
    long warm_ms = b->quick ? 2000 : 10000, measure_ms = b->quick ? 1000 : BENCH_SPREAD_MEASURE_MS;
    long delivered = 0;
    double t0 = 0, ack_s = 0;
    for (long tick = 0; tick < warm_ms + measure_ms; tick++, clock_ms++) {
        if (tick == warm_ms) {
            t0 = bench_now();
            ack_s = 0;
            delivered = 0;
        }
        for (int i = 0; i < BENCH_SPREAD_PER_MS; i++, n++) {
            char payload[BENCH_PAYLOAD];
            bench_fill(payload, sizeof payload, n);
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            store_send_req_t req = { .topic = BENCH_TOPIC,
                                     .topic_len = strlen(BENCH_TOPIC),
                                     .payload = payload,
                                     .payload_len = sizeof payload,
                                     .delay_ms = 1 + (rng >> 33) % 9999 };
            uint64_t id, due;
            if (store_send(s, &req, clock_ms, &id, &due, err, sizeof err) != 0) {
                bench_die("store_send: %s", err);
            }
        }
        bench_commit(s);
        while (bench_move(s, clock_ms, 1000) > 0) {
            bench_commit(s);
        }
        bench_commit(s);
        for (int g = 0; g < groups; g++) {
            delivered += spread_consume(s, names[g], clock_ms, msgs, ids, &ack_s);
        }
    }
    double secs = bench_now() - t0;
    bench_progress("spread, %d group%s: %ld deliveries in %.2f s", groups, groups == 1 ? "" : "s", delivered, secs);
    char name[96];
    snprintf(name, sizeof name, "per delivery, %d group%s (send, moves, lease, ack)", groups, groups == 1 ? "" : "s");
    bench_row("spread", name, secs * 1e6 / (double)delivered, 2, "us", "", -1, NULL);
    snprintf(name, sizeof name, "of which store_ack, %d group%s", groups, groups == 1 ? "" : "s");
    bench_row("spread", name, ack_s * 1e6 / (double)delivered, 2, "us", "", -1, NULL);
    free(msgs);
    bench_close(s);
    bench_case_done(b, path);
}

static void part_spread(bench_t *b)
{
    spread_case(b, 1);
    spread_case(b, 2);
}

/* ---- cycle ------------------------------------------------------------------------- */

#define CYCLE_ROUND    1024 /* SENDs per round, and the lease and ACK batch */
#define CYCLE_STEP_MS  50   /* the injected clock per round */
#define CYCLE_GC_GRACE 1000 /* store_collect's grace, as the broker's */

/* One round's deliveries at clock_ms: lease all that is ready (CYCLE_ROUND a
 * call), ACK each batch, then one GC step. Returns how many were delivered. */
static long cycle_deliver(store_t *s, uint64_t clock_ms, msg_owned_t *msgs, uint64_t *ids)
{
    char err[512];
    long delivered = 0;
    for (;;) {
        int got = 0;
        if (store_lease(s, BENCH_GROUP, strlen(BENCH_GROUP), BENCH_TOPIC, strlen(BENCH_TOPIC), CYCLE_ROUND,
                        BENCH_LEASE_MS, clock_ms, msgs, &got, err, sizeof err) != 0) {
            bench_die("store_lease: %s", err);
        }
        if (got == 0) {
            break;
        }
        for (int i = 0; i < got; i++) {
            ids[i] = msgs[i].m.id;
            msg_owned_free(&msgs[i]);
        }
        bench_commit(s);
        int released = 0;
        if (store_ack(s, BENCH_GROUP, strlen(BENCH_GROUP), ids, got, &released, err, sizeof err) != 0) {
            bench_die("store_ack: %s", err);
        }
        if (released != got) {
            bench_die("store_ack released %d of %d leases", released, got);
        }
        bench_commit(s);
        delivered += got;
    }
    int work = 0;
    if (store_collect(s, clock_ms, CYCLE_GC_GRACE, 4 * CYCLE_ROUND, &work, err, sizeof err) != 0) {
        bench_die("store_collect: %s", err);
    }
    bench_commit(s);
    return delivered;
}

static void part_cycle(bench_t *b)
{
    long n = b->quick ? 20000 : 200000, rounds = (n + CYCLE_ROUND - 1) / CYCLE_ROUND, delivered = 0;
    char *path = bench_case_dir(b, "cycle");
    store_t *s = bench_store_open(path, 0, 1);
    uint64_t clock_ms = BENCH_T0_MS;
    bench_group_create(s, clock_ms);
    msg_owned_t *msgs = xmalloc(CYCLE_ROUND * sizeof *msgs);
    uint64_t *ids = xmalloc(CYCLE_ROUND * sizeof *ids);
    double t0 = bench_now();
    /* after the last SEND, rounds go on until level 1's delay has passed */
    for (long r = 0; r < rounds + 1000 / CYCLE_STEP_MS + 1; r++) {
        clock_ms += CYCLE_STEP_MS;
        for (long i = r * CYCLE_ROUND; r < rounds && i < n && i < (r + 1) * CYCLE_ROUND; i++) {
            bench_send(s, 1, clock_ms, (uint64_t)i);
        }
        bench_commit(s);
        bench_move(s, clock_ms, INT_MAX);
        bench_commit(s);
        delivered += cycle_deliver(s, clock_ms, msgs, ids);
    }
    double secs = bench_now() - t0;
    if (delivered != n) {
        bench_die("cycle delivered %ld of %ld messages", delivered, n);
    }
    free(msgs);
    free(ids);
    bench_close(s);
    bench_case_done(b, path);
    char name[96];
    snprintf(name, sizeof name, "whole life, %ld messages, rounds of %d, sync off", n, CYCLE_ROUND);
    bench_row("cycle", name, (double)n / secs, 0, "msgs/s", "", -1, NULL);
    bench_row("cycle", "per message", secs * 1e6 / (double)n, 2, "us", "callgrind: instructions", -1, NULL);
}

/* ---- the commit log (levels/clog.h, docs/design-commitlog.md step 1) ---------------- */

/* The raw part's records (an 18-byte level key and a 100-byte value) written
 * two ways in the same run: appended to the commit log in batches of 512,
 * each batch one clog_append (records, COMMIT, one pwrite) and one clog_sync
 * (fdatasync), segments pre-written off the clock as the design's pool
 * keeps them (128 MiB; 16 MiB with --quick); and leveldb_write with sync on,
 * batches of 512, on a fresh
 * LevelDB with the store's options. The same count either way (400 batches;
 * 40 with --quick), building the records inside the timed loop on both
 * sides. Instructions per record: run under callgrind and read clog_batch_add
 * + clog_append + clog_sync against leveldb_writebatch_put + leveldb_write
 * inclusive (docs/BENCH-broker.md). */
static void part_clog(bench_t *b)
{
    enum {
        BATCH = 512,
        RECORD = BENCH_RAW_KEY + BENCH_RAW_VALUE
    };
    const long n = (b->quick ? 40L : 400L) * BATCH;
    const uint64_t segment = (b->quick ? UINT64_C(16) : UINT64_C(128)) << 20; /* quick: less to pre-write */
    char rec[RECORD], err[512];
    char *path = bench_case_dir(b, "clog-b%d", BATCH);
    if (mkdir(path, 0700) != 0) {
        bench_die("mkdir %s: %s", path, strerror(errno));
    }
    clog_options_t o = { path, segment, 0, 0, 0, 0 };
    clog_t *c = NULL;
    if (clog_open(&o, &c, NULL, err, sizeof err) != 0 ||
        clog_prepare(c, (unsigned)((uint64_t)n * (RECORD + 40) / segment + 1), err, sizeof err) != 0) {
        bench_die("clog: %s", err);
    }
    clog_batch_t cb = { 0 };
    uint64_t seq = 0, id;
    double t0 = bench_now();
    for (long i = 0; i < n;) {
        raw_key(rec, BENCH_T0_MS + 1000, ++seq);
        bench_fill(rec + BENCH_RAW_KEY, BENCH_RAW_VALUE, seq);
        int rc = clog_batch_add(c, &cb, rec, sizeof rec, &id, err, sizeof err);
        if (rc == CLOG_BATCH_FULL) { /* the segment's end: append what fits, the rest opens the next */
            rc = clog_append(c, &cb, err, sizeof err) || clog_batch_add(c, &cb, rec, sizeof rec, &id, err, sizeof err);
        }
        if (rc != 0) {
            bench_die("clog: %s", err);
        }
        if (++i % BATCH == 0 && (clog_append(c, &cb, err, sizeof err) != 0 || clog_sync(c, err, sizeof err) != 0)) {
            bench_die("clog: %s", err);
        }
    }
    double clog_rate = (double)n / (bench_now() - t0);
    uint64_t log_bytes = clog_end(c);
    clog_batch_free(&cb);
    clog_close(c);
    bench_case_done(b, path);

    path = bench_case_dir(b, "clog-leveldb-b%d", BATCH);
    raw_db_t r;
    raw_open(&r, path, 1, 1);
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    seq = 0;
    t0 = bench_now();
    for (long i = 0; i < n; i += BATCH) {
        raw_write_batch(&r, wb, BATCH, &seq);
    }
    double ldb_rate = (double)n / (bench_now() - t0);
    leveldb_writebatch_destroy(wb);
    raw_close(&r);
    bench_case_done(b, path);

    char name[80];
    snprintf(name, sizeof name, "clog append + fdatasync per %d, %ld records", BATCH, n);
    bench_row("clog", name, clog_rate, 0, "records/s", "beside leveldb_write sync on", clog_rate / ldb_rate, NULL);
    snprintf(name, sizeof name, "leveldb_write sync on, batch %d, same records", BATCH);
    bench_row("clog", name, ldb_rate, 0, "records/s", "the store's writes today", -1, NULL);
    bench_row("clog", "log bytes per record (header, padding, COMMIT)", (double)log_bytes / (double)n, 1, "bytes",
              "118-byte records", -1, NULL);
}

/* ---- clogcold: appends into a recycled segment whose pages were evicted ---------------- */

#define CLOGCOLD_PAYLOAD 14376 /* a record of 32 + 14 376 bytes and a COMMIT of 56: 14 464 a batch (a flood's) */
#define CLOGCOLD_BATCH   14464

/* read_bytes of /proc/self/io: what this process (its threads too) read from the disk. */
static uint64_t clogcold_read_bytes(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    unsigned long long v = 0;
    char line[128];
    while (f != NULL && fgets(line, sizeof line, f) != NULL && sscanf(line, "read_bytes: %llu", &v) != 1) {
    }
    if (f != NULL) {
        fclose(f);
    }
    return v;
}

/* 1 when every page of the file at path is in the page cache (mincore of a read-only mapping). */
static int clogcold_resident(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        bench_die("clogcold: %s: %s", path, strerror(errno));
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = ((size_t)st.st_size + page - 1) / page, in = 0;
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    unsigned char *vec = xmalloc(n);
    if (map == MAP_FAILED || mincore(map, (size_t)st.st_size, vec) != 0) {
        bench_die("clogcold: mincore %s: %s", path, strerror(errno));
    }
    for (size_t i = 0; i < n; i++) {
        in += vec[i] & 1;
    }
    free(vec);
    munmap(map, (size_t)st.st_size);
    close(fd);
    return in == n;
}

static uint64_t clogcold_append(clog_t *c, const char *payload)
{
    char err[512];
    clog_batch_t cb = { 0 };
    uint64_t id = 0;
    if (clog_batch_add(c, &cb, payload, CLOGCOLD_PAYLOAD, &id, err, sizeof err) != 0 ||
        clog_append(c, &cb, err, sizeof err) != 0) {
        bench_die("clogcold: %s", err);
    }
    clog_batch_free(&cb);
    return id;
}

/* One case: a log of `segment`-byte segments whose first is recycled (the spare at 2 segments), the second filled
 * to its last batch; the spare evicted (fdatasync + POSIX_FADV_DONTNEED) unless `evict` is 0, read back by
 * clog_prepare_step (pace 10 ms, the storage thread's in a segment's first half) when `read_back` is set; then the
 * switch into it (not timed) and a segment of appends timed one by one. */
static void clogcold_case(bench_t *b, uint64_t segment, int evict, int read_back, const char *name)
{
    char err[512], spare[PATH_MAX + 64];
    static char payload[CLOGCOLD_PAYLOAD];
    bench_fill(payload, sizeof payload, 7);
    char *path = bench_case_dir(b, "clogcold-%d-%d", evict, read_back);
    if (mkdir(path, 0700) != 0) {
        bench_die("mkdir %s: %s", path, strerror(errno));
    }
    clog_options_t o = { path, segment, 0, 0, 0, 0 };
    clog_t *c = NULL;
    if (clog_open(&o, &c, NULL, err, sizeof err) != 0) {
        bench_die("clogcold: %s", err);
    }
    uint64_t id = 0;
    while (id < segment) {
        id = clogcold_append(c, payload);
    }
    clog_keep_from(c, id);
    if (clog_sync(c, err, sizeof err) != 0 || clog_recycle(c, 0, err, sizeof err) != 0) {
        bench_die("clogcold: %s", err);
    }
    while (clog_end(c) + 2 * CLOGCOLD_BATCH < 2 * segment) {
        clogcold_append(c, payload);
    }
    if (clog_sync(c, err, sizeof err) != 0) {
        bench_die("clogcold: %s", err);
    }
    snprintf(spare, sizeof spare, "%s/clog-%016llx.seg", path, (unsigned long long)(2 * segment));
    int fd = open(spare, O_RDWR | O_CLOEXEC);
    if (fd < 0 || fdatasync(fd) != 0 || (evict && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0)) {
        bench_die("clogcold: evicting %s: %s", spare, strerror(errno));
    }
    close(fd);
    double read_back_s = 0;
    uint64_t read_back_bytes = clogcold_read_bytes();
    if (read_back) {
        double t0 = bench_now();
        while (!clogcold_resident(spare)) {
            if (clog_prepare_step(c, 10, err, sizeof err) < 0 || bench_now() - t0 > 60) {
                bench_die("clogcold: the spare was not read back in 60 s: %s", err);
            }
            usleep(1000);
        }
        read_back_s = bench_now() - t0;
    }
    read_back_bytes = clogcold_read_bytes() - read_back_bytes;
    while (clog_end(c) < 2 * segment) {
        clogcold_append(c, payload); /* the switch: a header, a rename, the directory synced */
    }
    uint64_t read0 = clogcold_read_bytes();
    int n = 0;
    double t0 = bench_now();
    while (clog_end(c) + CLOGCOLD_BATCH <= 3 * segment) {
        clogcold_append(c, payload);
        n++;
    }
    double each = (bench_now() - t0) / n;
    uint64_t appends_read = clogcold_read_bytes() - read0;
    clog_close(c);
    bench_case_done(b, path);
    char row[80], limit[64];
    snprintf(row, sizeof row, "append of %d bytes, %s", CLOGCOLD_BATCH, name);
    snprintf(limit, sizeof limit, "disk read %.1f MB in %d appends", (double)appends_read / 1e6, n);
    bench_row("clogcold", row, each * 1e6, 1, "us", limit, -1, NULL);
    if (read_back) {
        snprintf(limit, sizeof limit, "disk read %.1f MB on its thread", (double)read_back_bytes / 1e6);
        bench_row("clogcold", "  its read-back before the switch", read_back_s * 1e3, 0, "ms", limit, -1, NULL);
    }
}

/* `clogcold`: what an evicted recycled spare costs the appends (levels/clog_prewrite.c, "Why a read-back"): a
 * segment of 14 464-byte appends (64 MiB; 16 with --quick; no fdatasync among them) into the spare cached, evicted,
 * and evicted then read back by the pre-writer thread (clog_prepare_step) before the switch; µs an append and the
 * disk bytes the appends read (/proc/self/io read_bytes, which counts the pre-writer's reads too: they are
 * reported apart, taken before the appends). */
static void part_clogcold(bench_t *b)
{
    uint64_t segment = (b->quick ? UINT64_C(16) : UINT64_C(64)) << 20;
    clogcold_case(b, segment, 0, 0, "spare cached");
    clogcold_case(b, segment, 1, 0, "spare evicted");
    clogcold_case(b, segment, 1, 1, "spare evicted, read back");
}

/* ---- cq: the consume queues and where-slots (issue 13 step 2) ---------------------------- */

/* `cq`: what a consume-queue entry and a where-slot cost (levels/cq.h,
 * levels/slot.h; docs/design-commitlog.md §2), beside the LevelDB put they
 * replace, in the same run. N = 393 216 (3 * 2^17, so the queue switches files
 * once; 24 576 with --quick): cq_append of N entries (flushed in runs of 1024
 * by the queue itself), cq_read of each once (one entry a call, as a head is
 * read) and again in runs of 64, slot_put of N slots (appends) and of N overwrites at scattered
 * ordinals (a move rewrites its slot), then N leveldb_writebatch_put of an
 * 18-byte level key and a 100-byte value, 512 a leveldb_write, sync off (the
 * `L` put a hop costs today). Nothing is synced: the design syncs these files
 * only at checkpoints. Instructions per call: `valgrind --tool=callgrind
 * levels-bench --only cq`, then callgrind_annotate --inclusive=yes: cq_append,
 * cq_read, slot_put, leveldb_writebatch_put + leveldb_write, each ÷ its calls. */
static void part_cq(bench_t *b)
{
    const uint64_t n = b->quick ? UINT64_C(3) << 13 : UINT64_C(3) << 17;
    const int ldb_batch = 512;
    char *path = bench_case_dir(b, "cq");
    if (mkdir(path, 0700) != 0) {
        bench_die("mkdir %s: %s", path, strerror(errno));
    }
    char err[512];
    cq_t *q;
    if (cq_open(path, 1, 0, 0, &q, err, sizeof err) != 0) {
        bench_die("cq_open: %s", err);
    }
    double t0 = bench_now();
    for (uint64_t i = 0; i < n; i++) {
        cq_entry_t e = { BENCH_T0_MS + i * 210, BENCH_T0_MS + 1000 + i };
        if (cq_append(q, &e, NULL, err, sizeof err) != 0) {
            bench_die("cq_append: %s", err);
        }
    }
    if (cq_flush(q, err, sizeof err) != 0) {
        bench_die("cq_flush: %s", err);
    }
    double t_append = bench_now() - t0;
    t0 = bench_now();
    for (uint64_t i = 0; i < n; i++) {
        cq_entry_t e;
        if (cq_read(q, i, 1, &e, err, sizeof err) != 0 || e.log_offset != BENCH_T0_MS + i * 210) {
            bench_die("cq_read %llu: %s", (unsigned long long)i, err);
        }
    }
    double t_read = bench_now() - t0;
    cq_entry_t run[64];
    t0 = bench_now();
    for (uint64_t i = 0; i < n; i += 64) {
        if (cq_read(q, i, 64, run, err, sizeof err) != 0 || run[63].log_offset != BENCH_T0_MS + (i + 63) * 210) {
            bench_die("cq_read run at %llu: %s", (unsigned long long)i, err);
        }
    }
    double t_read_run = bench_now() - t0;
    if (cq_close(q, err, sizeof err) != 0) {
        bench_die("cq_close: %s", err);
    }
    slot_file_t *sf;
    if (slot_file_open(path, BENCH_T0_MS, 1, &sf, err, sizeof err) != 0) {
        bench_die("slot_file_open: %s", err);
    }
    double t_slot[2]; /* appends, then overwrites at scattered ordinals (moves) */
    for (int pass = 0; pass < 2; pass++) {
        t0 = bench_now();
        for (uint64_t i = 0; i < n; i++) {
            uint64_t ordinal = pass == 0 ? i : (i * 7919) % n;
            slot_t sl = { BENCH_T0_MS + ordinal * 210, 2, 0, i };
            if (slot_put(sf, ordinal, &sl, err, sizeof err) != 0) {
                bench_die("slot_put: %s", err);
            }
        }
        if (slot_flush(sf, err, sizeof err) != 0) {
            bench_die("slot_flush: %s", err);
        }
        t_slot[pass] = bench_now() - t0;
    }
    if (slot_file_close(sf, err, sizeof err) != 0) {
        bench_die("slot_file_close: %s", err);
    }
    char *ldb = bench_case_dir(b, "cq-leveldb");
    raw_db_t r;
    raw_open(&r, ldb, 1, 0);
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    uint64_t seq = 0;
    t0 = bench_now();
    for (uint64_t i = 0; i < n; i += (uint64_t)ldb_batch) {
        raw_write_batch(&r, wb, ldb_batch, &seq);
    }
    double t_ldb = bench_now() - t0;
    leveldb_writebatch_destroy(wb);
    raw_close(&r);
    bench_case_done(b, ldb);
    bench_case_done(b, path);
    double ldb_rate = (double)seq / t_ldb;
    bench_row("cq", "cq_append, flushed in runs of 1024", (double)n / t_append, 0, "entries/s", "", -1, NULL);
    bench_row("cq", "cq_read, one entry a call", (double)n / t_read, 0, "entries/s", "", -1, NULL);
    bench_row("cq", "cq_read, runs of 64", (double)n / t_read_run, 0, "entries/s", "", -1, NULL);
    bench_row("cq", "slot_put appends, flushed in runs of 1024", (double)n / t_slot[0], 0, "slots/s", "", -1, NULL);
    bench_row("cq", "slot_put overwrites, scattered (a pwrite each)", (double)n / t_slot[1], 0, "slots/s", "", -1,
              NULL);
    bench_row("cq", "leveldb put 18+100 B, batch 512, sync off", ldb_rate, 0, "puts/s", "what a hop writes today", -1,
              NULL);
    bench_row("cq", "cq_append vs leveldb put", (double)n / t_append / ldb_rate, 2, "x", "", -1, NULL);
}

/* ---- redo: the commit log's replay at open (issue 13 step 3) ------------------------ */

#define REDO_SEGMENT (UINT64_C(128) << 20)

static int redo_bounds_empty(void *ctx, uint32_t queue, uint64_t *head, uint64_t *tail, char *err, size_t errlen)
{
    (void)ctx, (void)queue, (void)err, (void)errlen;
    *head = *tail = 0;
    return 0;
}

/* The writer of `redo`, a child that exits without closing, as a kill -9
 * leaves the log (synced, nothing applied): the flood's shape until the log
 * holds `bytes`. Exit code 0 when it did. */
static void __attribute__((noreturn)) redo_writer(const char *path, uint64_t bytes)
{
    raw_db_t r;
    raw_open(&r, path, 1, 0);
    redo_options_t o = { path, REDO_SEGMENT, 0, r.db, path, redo_bounds_empty, NULL };
    redo_t *rd = NULL;
    char err[512];
    if (redo_open(&o, &rd, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "levels-bench: redo writer: %s\n", err);
        _exit(2);
    }
    char payload[118];
    memset(payload, 'm', sizeof payload);
    redo_batch_t b = { 0 };
    uint64_t tail = 0;
    while (clog_end(redo_log(rd)) < bytes) {
        for (int i = 0; i < 512; i++) {
            uint64_t id;
            if (redo_add_message(rd, &b, payload, sizeof payload, &id, err, sizeof err) != 0) {
                fprintf(stderr, "levels-bench: redo writer: %s\n", err);
                _exit(3);
            }
            redo_cq_write(&b, 1, tail, &(cq_entry_t){ id, tail });
            redo_slot_write(&b, 0, tail, &(slot_t){ id, 1, 0, tail });
            tail++;
        }
        char v[8];
        be64_put(v, tail);
        redo_db_put(&b, "t01", 3, v, 8);
        if (redo_commit(rd, &b, NULL, err, sizeof err) != 0) {
            fprintf(stderr, "levels-bench: redo writer: %s\n", err);
            _exit(4);
        }
    }
    _exit(clog_sync(redo_log(rd), err, sizeof err) == 0 ? 0 : 5);
}

/* Read the log's bytes [0, end) of the segments in path with pread in 1 MiB
 * runs; with crc, also CRC-32C them. Seconds. */
static double redo_raw_read(const char *path, uint64_t end, int crc)
{
    static char buf[1 << 20];
    uint32_t c = 0;
    double t0 = bench_now();
    for (uint64_t base = 0; base < end; base += REDO_SEGMENT) {
        char name[PATH_MAX];
        snprintf(name, sizeof name, "%s/clog-%016llx.seg", path, (unsigned long long)base);
        int fd = open(name, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            bench_die("open %s: %s", name, strerror(errno));
        }
        uint64_t n = end - base < REDO_SEGMENT ? end - base : REDO_SEGMENT;
        for (uint64_t at = 0; at < n; at += sizeof buf) {
            size_t want = n - at < sizeof buf ? (size_t)(n - at) : sizeof buf;
            if (pread(fd, buf, want, (off_t)at) != (ssize_t)want) {
                bench_die("pread %s: %s", name, strerror(errno));
            }
            if (crc) {
                c ^= store_crc32c(buf, want);
            }
        }
        close(fd);
    }
    double t = bench_now() - t0;
    if (c == 1) {
        printf(" "); /* keeps the CRC from being optimised away */
    }
    return t;
}

/* `redo`: redo_open of a log of 64 MiB (8 with --quick) in the flood's shape
 * (118-byte messages, each with a CQ entry and a where-slot, 512 a batch, one
 * LevelDB put a batch), synced and never applied, as a kill -9 leaves it (the
 * log in the page cache), beside the same-run baselines taken after it (the
 * log still in the page cache): a raw pread of the same bytes, and a pread +
 * CRC-32C of them (the redo checks each record's
 * CRC twice: the open's chain walk and the redo's walk). Wall clock; the
 * open syncs the log, the CQ and slot files and LevelDB (real fdatasyncs).
 * Instructions: `valgrind --tool=callgrind --toggle-collect=redo_open
 * levels-bench --only redo`. */
static void part_redo(bench_t *b)
{
    uint64_t bytes = (b->quick ? UINT64_C(8) : UINT64_C(64)) << 20;
    char *path = bench_case_dir(b, "redo");
    if (mkdir(path, 0700) != 0) {
        bench_die("mkdir %s: %s", path, strerror(errno));
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        bench_die("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        redo_writer(path, bytes);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        bench_die("the redo writer failed: status %#x", status);
    }
    raw_db_t r;
    raw_open(&r, path, 0, 0);
    redo_options_t o = { path, REDO_SEGMENT, 0, r.db, path, redo_bounds_empty, NULL };
    redo_open_report_t rep;
    redo_t *rd = NULL;
    char err[512];
    double t0 = bench_now();
    if (redo_open(&o, &rd, &rep, err, sizeof err) != 0) {
        bench_die("redo_open: %s", err);
    }
    double t_open = bench_now() - t0;
    if (rep.cq_writes == 0 || rep.cq_writes != rep.slot_writes || rep.bytes < bytes) {
        bench_die("redo_open redid %llu CQ and %llu slot writes over %llu bytes: wrong",
                  (unsigned long long)rep.cq_writes, (unsigned long long)rep.slot_writes,
                  (unsigned long long)rep.bytes);
    }
    /* the baselines after the redo, over the bytes it walked (from the log's start: no checkpoint before) */
    double t_read = redo_raw_read(path, rep.log.end, 0);
    double t_crc = redo_raw_read(path, rep.log.end, 1);
    if (redo_close(rd, err, sizeof err) != 0) {
        bench_die("redo_close: %s", err);
    }
    raw_close(&r);
    bench_case_done(b, path);
    char name[96];
    snprintf(name, sizeof name, "redo_open, %.1f MiB of log, %llu messages", (double)rep.bytes / (1 << 20),
             (unsigned long long)rep.cq_writes);
    bench_row("redo", name, t_open * 1e3, 1, "ms", "", -1, NULL);
    bench_row("redo", "  of which the log's open (chain walk, scan)", (double)rep.log_open_us / 1e3, 1, "ms", "", -1,
              NULL);
    bench_row("redo", "  of which the redo walk", (double)rep.redo_us / 1e3, 1, "ms", "", -1, NULL);
    bench_row("redo", "  of which the checkpoint (syncs)", (double)rep.checkpoint_us / 1e3, 1, "ms", "", -1, NULL);
    bench_row("redo", "raw pread of the same bytes, 1 MiB runs", t_read * 1e3, 1, "ms", "the floor", t_open / t_read,
              "x");
    bench_row("redo", "raw pread + CRC-32C of the same bytes", t_crc * 1e3, 1, "ms", "", t_open / t_crc, "x");
}

/* ---- overlay: the held writes' cost in the redo (issue 13's commit-log store) ---- */

#define OVERLAY_BATCH     512                                     /* messages a batch */
#define OVERLAY_OPS       6                                       /* LevelDB writes a message: 3 puts, 3 deletes */
#define OVERLAY_MSG_BYTES (UINT64_C(65 + 49 + 45 + 29 + 37 + 45)) /* their derived-record bytes */
#define OVERLAY_SEGMENT   (UINT64_C(16) << 20)
#define OVERLAY_KEY_MAX   40

/* A key of len bytes: the tag, message m big-endian, then filler. */
static void overlay_key(char *k, char tag, uint64_t m, size_t len)
{
    memset(k, 'k', len);
    k[0] = tag;
    be64_put(k + 1, m);
}

/* Message m's six writes, as the cycle's store makes a message's: its put
 * under 'A' (24-byte key, 32-byte value), 'B' (32, 8) and 'C' (20, 16); the
 * deletes of the 'A' put a batch ago and the 'B' put two batches ago; a
 * delete of a 40-byte key never put. put/del are redo_db_put/redo_db_delete
 * or the plain writebatch's. */
typedef struct overlay_sink {
    void (*put)(void *ctx, const char *k, size_t kn, const char *v, size_t vn);
    void (*del)(void *ctx, const char *k, size_t kn);
    void *ctx;
} overlay_sink_t;

static void overlay_message(const overlay_sink_t *s, uint64_t m)
{
    char k[OVERLAY_KEY_MAX], v[32];
    bench_fill(v, sizeof v, m);
    overlay_key(k, 'A', m, 24);
    s->put(s->ctx, k, 24, v, 32);
    overlay_key(k, 'B', m, 32);
    s->put(s->ctx, k, 32, v, 8);
    overlay_key(k, 'C', m, 20);
    s->put(s->ctx, k, 20, v, 16);
    overlay_key(k, 'A', m - OVERLAY_BATCH, 24);
    s->del(s->ctx, k, 24);
    overlay_key(k, 'B', m - 2 * OVERLAY_BATCH, 32);
    s->del(s->ctx, k, 32);
    overlay_key(k, 'X', m, 40);
    s->del(s->ctx, k, 40);
}

static void overlay_redo_put(void *ctx, const char *k, size_t kn, const char *v, size_t vn)
{
    redo_db_put(ctx, k, kn, v, vn);
}

static void overlay_redo_del(void *ctx, const char *k, size_t kn)
{
    redo_db_delete(ctx, k, kn);
}

static void overlay_plain_put(void *ctx, const char *k, size_t kn, const char *v, size_t vn)
{
    leveldb_writebatch_put(ctx, k, kn, v, vn);
}

static void overlay_plain_del(void *ctx, const char *k, size_t kn)
{
    leveldb_writebatch_delete(ctx, k, kn);
}

/* Batch i's fate in the cycle's shape: batches 0 and 1 of every 4 are
 * synced and applied right after their commit; batch 2 is held across the
 * commit of batch 3, after which both are synced and applied. */
static int overlay_applied_at_once(long i)
{
    return i % 4 != 2;
}

/* One batch of the redo (messages [first, first + OVERLAY_BATCH)): built,
 * committed, and, when its fate says so, synced and applied; the seconds
 * spent outside clog_sync (the fdatasync is the disk's, not the overlay's)
 * are added to *secs, those inside to *sync_secs. With applied_in_one, a
 * batch applied at once is committed by redo_commit_applied (it syncs
 * inside: all its time goes to *secs, *sync_secs gets nothing). Noinline
 * for callgrind's --toggle-collect. */
static __attribute__((noinline)) void overlay_redo_batch(redo_t *rd, redo_batch_t *b, long i, uint64_t first,
                                                         int applied_in_one, double *secs, double *sync_secs)
{
    char err[512];
    double t0 = bench_now();
    if (redo_batch_room(rd, b, OVERLAY_BATCH * OVERLAY_MSG_BYTES, err, sizeof err) != 0) {
        bench_die("overlay: redo_batch_room: %s", err);
    }
    overlay_sink_t s = { overlay_redo_put, overlay_redo_del, b };
    for (uint64_t m = first; m < first + OVERLAY_BATCH; m++) {
        overlay_message(&s, m);
    }
    if (applied_in_one && overlay_applied_at_once(i)) {
        if (redo_commit_applied(rd, b, NULL, err, sizeof err) != 0) {
            bench_die("overlay: redo_commit_applied: %s", err);
        }
        *secs += bench_now() - t0;
        return;
    }
    if (redo_commit(rd, b, NULL, err, sizeof err) != 0) {
        bench_die("overlay: redo_commit: %s", err);
    }
    *secs += bench_now() - t0;
    if (!overlay_applied_at_once(i)) {
        return;
    }
    t0 = bench_now();
    if (clog_sync(redo_log(rd), err, sizeof err) != 0) {
        bench_die("overlay: clog_sync: %s", err);
    }
    *sync_secs += bench_now() - t0;
    t0 = bench_now();
    if (redo_apply_durable(rd, err, sizeof err) != 0) {
        bench_die("overlay: redo_apply_durable: %s", err);
    }
    *secs += bench_now() - t0;
}

/* The same batch's writes into a plain leveldb_writebatch_t, written
 * unsynced when the redo would apply it (a held one waits for the next). */
static __attribute__((noinline)) void overlay_plain_batch(raw_db_t *r, leveldb_writebatch_t *wb, long i, uint64_t first,
                                                          double *secs)
{
    double t0 = bench_now();
    overlay_sink_t s = { overlay_plain_put, overlay_plain_del, wb };
    for (uint64_t m = first; m < first + OVERLAY_BATCH; m++) {
        overlay_message(&s, m);
    }
    if (overlay_applied_at_once(i)) {
        char *err = NULL;
        leveldb_write(r->db, r->wopt, wb, &err);
        if (err != NULL) {
            bench_die("overlay: leveldb_write: %s", err);
        }
        leveldb_writebatch_clear(wb);
    }
    *secs += bench_now() - t0;
}

/* The redo case in its own directory: the seconds outside clog_sync (*secs;
 * redo_commit_applied's calls whole) and inside it (*sync_secs). */
static void overlay_redo_case(bench_t *b, long batches, int applied_in_one, double *secs, double *sync_secs)
{
    char *path = bench_case_dir(b, "overlay-redo-%d", applied_in_one);
    if (mkdir(path, 0700) != 0) {
        bench_die("mkdir %s: %s", path, strerror(errno));
    }
    raw_db_t rr;
    raw_open(&rr, path, 1, 0);
    redo_options_t o = { path, OVERLAY_SEGMENT, 0, rr.db, path, redo_bounds_empty, NULL };
    redo_t *rd = NULL;
    char err[512];
    if (redo_open(&o, &rd, NULL, err, sizeof err) != 0) {
        bench_die("overlay: redo_open: %s", err);
    }
    redo_batch_t rb = { 0 };
    *secs = *sync_secs = 0;
    for (long i = 0; i < batches; i++) {
        overlay_redo_batch(rd, &rb, i, (uint64_t)i * OVERLAY_BATCH + 2 * OVERLAY_BATCH, applied_in_one, secs,
                           sync_secs);
    }
    if (redo_held(rd) != 0 || overlay_count(redo_overlay(rd)) != 0) {
        bench_die("overlay: %zu batches and %zu places still held at the end", redo_held(rd),
                  overlay_count(redo_overlay(rd)));
    }
    redo_batch_free(&rb);
    if (redo_close(rd, err, sizeof err) != 0) {
        bench_die("overlay: redo_close: %s", err);
    }
    raw_close(&rr);
    bench_case_done(b, path);
}

/* `overlay`: the cost of a LevelDB write carried through the commit log's
 * redo (levels/clog_redo.h: encoded into the batch's derived-writes record,
 * held in the readers' overlay until the log's sync, then applied) beside
 * the same writes into a plain leveldb_writebatch_t, same run: 100 000
 * messages (10 000 with --quick) of six 20-40-byte-key writes each, batches
 * of 512, three batches in four applied right after their sync and one held
 * across the next commit. Wall clock outside the fdatasyncs, per write; then
 * the same redo with the batches applied at once committed by
 * redo_commit_applied (which syncs inside: compared with the first redo's
 * time including its fdatasyncs). Instructions: `valgrind --tool=callgrind
 * --toggle-collect=overlay_redo_batch --toggle-collect=overlay_plain_batch
 * levels-bench --only overlay --quick`, then callgrind_annotate
 * --inclusive=yes (overlay_redo_batch's row sums both redo cases: read its
 * callees redo_commit, redo_commit_applied, overlay_add and overlay_drop). */
static void part_overlay(bench_t *b)
{
    long n = b->quick ? 10240 : 102400, batches = n / OVERLAY_BATCH;
    double t_redo, t_redo_sync, t_one, t_one_sync;
    overlay_redo_case(b, batches, 0, &t_redo, &t_redo_sync);
    overlay_redo_case(b, batches, 1, &t_one, &t_one_sync);

    char *path = bench_case_dir(b, "overlay-plain");
    raw_db_t rp;
    raw_open(&rp, path, 1, 0);
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    double t_plain = 0;
    for (long i = 0; i < batches; i++) {
        overlay_plain_batch(&rp, wb, i, (uint64_t)i * OVERLAY_BATCH + 2 * OVERLAY_BATCH, &t_plain);
    }
    leveldb_writebatch_destroy(wb);
    raw_close(&rp);
    bench_case_done(b, path);

    double writes = (double)batches * OVERLAY_BATCH * OVERLAY_OPS;
    char name[96];
    snprintf(name, sizeof name, "redo: %.0f writes, commit + apply (no fdatasync)", writes);
    bench_row("overlay", name, t_redo / writes * 1e9, 0, "ns/write", "", t_redo / t_plain, "x plain");
    bench_row("overlay", "plain leveldb_writebatch_t, written alike", t_plain / writes * 1e9, 0, "ns/write",
              "the floor", -1, NULL);
    bench_row("overlay", "redo with its fdatasyncs", (t_redo + t_redo_sync) / writes * 1e9, 0, "ns/write", "", -1,
              NULL);
    bench_row("overlay", "  at-once batches by redo_commit_applied", (t_one + t_one_sync) / writes * 1e9, 0, "ns/write",
              "", (t_one + t_one_sync) / (t_redo + t_redo_sync), "x");
}

/* ---- lane: the remainder lane's heap and its load at open (issue 13 step 4a) ---- */

#define LANE_LIVE_TARGET UINT64_C(440000) /* docs/design-commitlog.md §4: the lane's live window at the target rate */
#define LANE_PAIRS       UINT64_C(1000000)
#define LANE_LOAD_REPS   5

/* A remainder's due, appended at index i of a lane filled at 440 entries per
 * ms of the injected clock: within a second after its append. */
static uint64_t lane_bench_due(uint64_t i, uint64_t *rng)
{
    uint64_t x = *rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    return BENCH_T0_MS + i / 440 + x % 1000;
}

static lane_t *lane_bench_fill(uint64_t live, uint64_t *rng)
{
    char err[256];
    lane_t *l = lane_new(0, (size_t)live + 1);
    for (uint64_t i = 0; i < live; i++) {
        if (lane_push(l, lane_bench_due(i, rng), BENCH_T0_MS + i * 146, i, err, sizeof err) != 0) {
            bench_die("lane_push: %s", err);
        }
    }
    return l;
}

/* n steady push + pop pairs on l (the lane keeps its size). Not inlined, so
 * callgrind_annotate --inclusive=yes shows each caller's instructions. */
static __attribute__((noinline)) void lane_bench_pairs(lane_t *l, uint64_t n, uint64_t *rng)
{
    char err[256];
    for (uint64_t k = 0; k < n; k++) {
        uint64_t i = lane_tail(l);
        if (lane_push(l, lane_bench_due(i, rng), BENCH_T0_MS + i * 146, i, err, sizeof err) != 0 ||
            lane_pop(l, NULL) != 1) {
            bench_die("lane push + pop %llu: %s", (unsigned long long)k, err);
        }
    }
}
/* The two callers callgrind tells apart; each checks its own lane's size
 * (which also keeps the compiler from folding them into one function). */
static __attribute__((noinline)) void lane_pairs_at_440000(lane_t *l, uint64_t n, uint64_t *rng)
{
    size_t size = lane_size(l);
    lane_bench_pairs(l, n, rng);
    if (lane_size(l) != size || size < LANE_LIVE_TARGET / 10) {
        bench_die("lane of %zu entries after the pairs, want %zu (at least 44 000)", lane_size(l), size);
    }
}
static __attribute__((noinline)) void lane_pairs_at_1000(lane_t *l, uint64_t n, uint64_t *rng)
{
    lane_bench_pairs(l, n, rng);
    if (lane_size(l) != 1000) {
        bench_die("small lane of %zu entries after the pairs, want 1000", lane_size(l));
    }
}

static cq_t *lane_bench_open_cq(const char *path, uint64_t n)
{
    char err[512];
    cq_t *q;
    if (cq_open(path, 19, 0, n, &q, err, sizeof err) != 0) {
        bench_die("cq_open: %s", err);
    }
    return q;
}

/* The baselines: the same window through cq_read in runs of 1024 (what the
 * load reads, without the pushes), and a plain read() of the CQ files' bytes. */
static double lane_bench_cq_read(const char *path, uint64_t n)
{
    static cq_entry_t run[1024];
    char err[512];
    double t0 = bench_now();
    cq_t *q = lane_bench_open_cq(path, n);
    uint64_t sum = 0;
    for (uint64_t at = 0; at < n; at += 1024) {
        size_t k = n - at < 1024 ? (size_t)(n - at) : 1024;
        if (cq_read(q, at, k, run, err, sizeof err) != 0) {
            bench_die("cq_read: %s", err);
        }
        sum += run[k - 1].due;
    }
    cq_close(q, NULL, 0);
    double t = bench_now() - t0;
    if (sum == 0) {
        bench_die("cq_read read nothing");
    }
    return t;
}

static double lane_bench_file_read(const char *path, uint64_t n)
{
    static char buf[1 << 20];
    double t0 = bench_now();
    for (uint64_t first = 0; first < n; first += CQ_FILE_ENTRIES) { /* each file the window covers */
        char file[PATH_MAX], name[64];
        cq_file_name(19, first, name, sizeof name);
        snprintf(file, sizeof file, "%s/%s", path, name);
        int fd = open(file, O_RDONLY);
        if (fd < 0) {
            bench_die("open %s: %s", file, strerror(errno));
        }
        uint64_t want = (n - first < CQ_FILE_ENTRIES ? n - first : CQ_FILE_ENTRIES) * CQ_ENTRY_BYTES, got = 0;
        while (got < want) {
            ssize_t k = read(fd, buf, want - got < sizeof buf ? (size_t)(want - got) : sizeof buf);
            if (k <= 0) {
                bench_die("read %s: %s", file, k < 0 ? strerror(errno) : "short");
            }
            got += (uint64_t)k;
        }
        close(fd);
    }
    return bench_now() - t0;
}

static double lane_bench_load(const char *path, uint64_t n)
{
    char err[512];
    double t0 = bench_now();
    cq_t *q = lane_bench_open_cq(path, n);
    lane_t *l;
    if (lane_load(q, (size_t)n, &l, err, sizeof err) != 0) {
        bench_die("lane_load: %s", err);
    }
    cq_close(q, NULL, 0);
    double t = bench_now() - t0;
    if (lane_size(l) != n) {
        bench_die("lane_load: %zu entries, want %llu", lane_size(l), (unsigned long long)n);
    }
    lane_free(l);
    return t;
}

/* `lane`: the remainder lane (levels/lane.h; docs/design-commitlog.md §4, §6).
 * Steady push + pop pairs on a lane holding 440 000 entries (the live window
 * at the target rate), and on one holding 1 000 (the same-run baseline: what
 * the heap's depth costs); dues are a remainder's shape, appended in time
 * order and due within a second. Instructions per pair: `valgrind
 * --tool=callgrind levels-bench --only lane`, then callgrind_annotate
 * --inclusive=yes: lane_pairs_at_440000 and lane_pairs_at_1000, each ÷ 10^6.
 * Then the load at open of a 440 000-entry lane CQ (two files, in the page
 * cache: written just before), medians of 5, beside the same window read
 * through cq_read in runs of 1024 and a plain read() of the file's bytes, in
 * the same run and interleaved with it. --quick: 10^5 pairs, 44 000 entries. */
static void part_lane(bench_t *b)
{
    uint64_t live = b->quick ? LANE_LIVE_TARGET / 10 : LANE_LIVE_TARGET;
    uint64_t pairs = b->quick ? LANE_PAIRS / 10 : LANE_PAIRS;
    uint64_t rng = 7;
    lane_t *big = lane_bench_fill(live, &rng);
    lane_t *small = lane_bench_fill(1000, &rng);
    double t0 = bench_now();
    lane_pairs_at_440000(big, pairs, &rng);
    double t_big = bench_now() - t0;
    t0 = bench_now();
    lane_pairs_at_1000(small, pairs, &rng);
    double t_small = bench_now() - t0;
    size_t big_bytes = lane_bytes(big);
    lane_free(big);
    lane_free(small);

    char *path = bench_case_dir(b, "lane");
    if (mkdir(path, 0700) != 0) {
        bench_die("mkdir %s: %s", path, strerror(errno));
    }
    char err[512];
    cq_t *q;
    if (cq_open(path, 19, 0, 0, &q, err, sizeof err) != 0) {
        bench_die("cq_open: %s", err);
    }
    rng = 11;
    for (uint64_t i = 0; i < live; i++) {
        cq_entry_t e = { BENCH_T0_MS + i * 146, lane_bench_due(i, &rng) };
        if (cq_append(q, &e, NULL, err, sizeof err) != 0) {
            bench_die("cq_append: %s", err);
        }
    }
    if (cq_close(q, err, sizeof err) != 0) {
        bench_die("cq_close: %s", err);
    }
    double t_load[LANE_LOAD_REPS], t_cq[LANE_LOAD_REPS], t_file[LANE_LOAD_REPS];
    for (int r = 0; r < LANE_LOAD_REPS; r++) {
        t_file[r] = lane_bench_file_read(path, live);
        t_cq[r] = lane_bench_cq_read(path, live);
        t_load[r] = lane_bench_load(path, live);
    }
    bench_case_done(b, path);
    double load = bench_median(t_load, LANE_LOAD_REPS), cq = bench_median(t_cq, LANE_LOAD_REPS),
           file = bench_median(t_file, LANE_LOAD_REPS);
    char name[96];
    snprintf(name, sizeof name, "push + pop at %llu live", (unsigned long long)live);
    bench_row("lane", name, t_big / (double)pairs * 1e9, 1, "ns", "", -1, NULL);
    bench_row("lane", "push + pop at 1000 live (baseline)", t_small / (double)pairs * 1e9, 1, "ns", "", t_big / t_small,
              "x");
    snprintf(name, sizeof name, "lane bytes at %llu live", (unsigned long long)live);
    bench_row("lane", name, (double)big_bytes / (1 << 20), 2, "MiB", "", -1, NULL);
    snprintf(name, sizeof name, "lane_load of %llu entries (median of %d)", (unsigned long long)live, LANE_LOAD_REPS);
    bench_row("lane", name, load * 1e3, 2, "ms", "", -1, NULL);
    bench_row("lane", "  cq_read of the same window, runs of 1024", cq * 1e3, 2, "ms", "", load / cq, "x");
    bench_row("lane", "  read() of the CQ files' bytes", file * 1e3, 2, "ms", "the floor", load / file, "x");
}

/* `msg`: the message codec, encode + decode of one message (topic BENCH_TOPIC,
 * a BENCH_PAYLOAD-byte payload, no group, key or reason: a SEND's) into a
 * reused buffer, in the record form (msg_encode_record + msg_decode_record at
 * its ordinal) and in today's form (msg_encode + msg_decode), 10^7 times each
 * (10^6 with --quick). Instructions per pair: `valgrind --tool=callgrind
 * levels-bench --only msg --quick`, then callgrind_annotate --inclusive=yes:
 * msg_pairs_record_form and msg_pairs_today, each ÷ 10^6. */
#define MSG_BENCH_PAIRS 10000000L

static msg_t msg_bench_message(char *payload)
{
    memset(payload, 'p', BENCH_PAYLOAD);
    msg_t m = { 0 };
    m.id = UINT64_C(1) << 32;
    m.created_ms = m.due_ms = BENCH_T0_MS;
    m.topic = (msg_str_t){ BENCH_TOPIC, (uint32_t)strlen(BENCH_TOPIC) };
    m.payload = (msg_str_t){ payload, BENCH_PAYLOAD };
    return m;
}

/* The payload bytes decoded, summed, so the loop's work is used. */
__attribute__((noinline)) static uint64_t msg_pairs_record_form(const msg_t *m, long pairs)
{
    char buf[256], err[256];
    uint64_t sum = 0;
    for (long i = 0; i < pairs; i++) {
        uint32_t ordinal = (uint32_t)i;
        size_t n = msg_encode_record(m, ordinal, buf, sizeof buf);
        msg_t back;
        if (n == 0 || msg_decode_record(buf, n, m->id, ordinal, &back, err, sizeof err) != 0) {
            bench_die("record form round trip %ld: %s", i, n ? err : "buffer too small");
        }
        sum += back.payload.len;
    }
    return sum;
}

__attribute__((noinline)) static uint64_t msg_pairs_today(const msg_t *m, long pairs)
{
    char buf[256], err[256];
    uint64_t sum = 0;
    for (long i = 0; i < pairs; i++) {
        size_t n = msg_encode(m, buf, sizeof buf);
        msg_t back;
        if (n == 0 || msg_decode(buf, n, &back, err, sizeof err) != 0) {
            bench_die("msg_encode round trip %ld: %s", i, n ? err : "buffer too small");
        }
        sum += back.payload.len;
    }
    return sum;
}

static void part_msg(bench_t *b)
{
    long pairs = b->quick ? MSG_BENCH_PAIRS / 10 : MSG_BENCH_PAIRS;
    char payload[BENCH_PAYLOAD];
    msg_t m = msg_bench_message(payload);
    double t0 = bench_now();
    uint64_t sum_record = msg_pairs_record_form(&m, pairs);
    double t_record = bench_now() - t0;
    t0 = bench_now();
    uint64_t sum_today = msg_pairs_today(&m, pairs);
    double t_today = bench_now() - t0;
    if (sum_record != sum_today || sum_record != (uint64_t)pairs * BENCH_PAYLOAD) {
        bench_die("msg: decoded payload bytes differ (%llu record form, %llu today)", (unsigned long long)sum_record,
                  (unsigned long long)sum_today);
    }
    char name[96];
    snprintf(name, sizeof name, "record form encode + decode, %zu bytes", msg_record_size(&m));
    bench_row("msg", name, t_record / (double)pairs * 1e9, 1, "ns", "", -1, NULL);
    snprintf(name, sizeof name, "msg_encode + msg_decode, %zu bytes (baseline)", msg_encoded_size(&m));
    bench_row("msg", name, t_today / (double)pairs * 1e9, 1, "ns", "", t_record / t_today, "x");
}

/* ---- main --------------------------------------------------------------------------- */

typedef struct bench_part {
    const char *name;
    void (*run)(bench_t *b);
    const char *what;
} bench_part_t;

static const bench_part_t bench_parts[] = {
    { "raw", part_raw, "raw LevelDB batched puts/s, the limit" },
    { "pipeline", part_pipeline, "send -> move_due -> lease -> ack msgs/s vs raw" },
    { "seek", part_seek, "next-head cost after 10^6 pops vs after 10" },
    { "open", part_open, "open time and RSS with 10^7 pending messages" },
    { "spread", part_spread, "steady random-ms delays: us per delivery and per ACK" },
    { "cycle", part_cycle, "a message's whole life, steady and deterministic (for callgrind)" },
    { "clog", part_clog, "commit log append + fdatasync per 512 beside leveldb_write sync on" },
    { "clogcold", part_clogcold, "appends into a recycled segment: cached, evicted, evicted and read back" },
    { "cq", part_cq, "consume-queue entries and where-slots per call vs a LevelDB put" },
    { "redo", part_redo, "the commit log's replay at open (64 MiB) beside a raw read of the same bytes" },
    { "lane", part_lane, "the remainder lane: push + pop at 440 000 live, its load at open vs a read" },
    { "msg", part_msg, "message codec: the record form's encode + decode vs today's, 64-byte payload" },
    { "overlay", part_overlay, "a LevelDB write through the commit log's redo vs a plain writebatch" },
};
#define BENCH_N_PARTS ((int)(sizeof bench_parts / sizeof bench_parts[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: levels-bench [--dir PATH] [--quick] [--only PART] [--lease-write-delay MS]\n"
               "  --dir PATH   put the LevelDB directories in PATH (kept); default: a mkdtemp\n"
               "               under $TMPDIR or /tmp, removed at the end\n"
               "  --quick      small sizes (a few seconds; for CI smoke runs)\n"
               "  --lease-write-delay MS  hold leases in memory this long before writing them\n"
               "               (0..10000, default 0: written at once; the broker's default is 100)\n"
               "  --only PART  run one part:\n");
    for (int i = 0; i < BENCH_N_PARTS; i++) {
        fprintf(f, "                 %-9s %s\n", bench_parts[i].name, bench_parts[i].what);
    }
    fprintf(f, "Prints figures; exits 0 even when a target is missed (non-zero only on errors).\n");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--probe-open") == 0) {
        return probe_open_main(argv[2]);
    }
    bench_t b;
    memset(&b, 0, sizeof b);
    b.self = argv[0];
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            b.quick = 1;
            bench_segment_bytes = UINT64_C(16) << 20;
        } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
            dir = argv[++i];
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            b.only = argv[++i];
        } else if (strcmp(argv[i], "--lease-write-delay") == 0 && i + 1 < argc) {
            char *end;
            const char *v = argv[++i];
            errno = 0;
            unsigned long long ms = strtoull(v, &end, 10);
            if (errno != 0 || end == v || *end != '\0' || v[0] == '-' || ms > 10000) {
                fprintf(stderr, "levels-bench: --lease-write-delay wants milliseconds 0..10000, not '%s'\n", v);
                return 2;
            }
            bench_lease_write_delay_ms = ms;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "levels-bench: unknown or incomplete argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (b.only != NULL) {
        int found = 0;
        for (int i = 0; i < BENCH_N_PARTS; i++) {
            found |= strcmp(b.only, bench_parts[i].name) == 0;
        }
        if (!found) {
            fprintf(stderr, "levels-bench: no part named '%s'\n", b.only);
            usage(stderr);
            return 2;
        }
    }
    if (dir == NULL) {
        const char *tmp = getenv("TMPDIR");
        if (tmp == NULL || tmp[0] == '\0') {
            tmp = "/tmp";
        }
        size_t n = strlen(tmp) + sizeof "/levels-bench.XXXXXX";
        b.dir = xmalloc(n);
        snprintf(b.dir, n, "%s/levels-bench.XXXXXX", tmp);
        if (mkdtemp(b.dir) == NULL) {
            bench_die("mkdtemp %s: %s", b.dir, strerror(errno));
        }
        b.dir_is_temp = 1;
        bench_temp_dir = b.dir;
        atexit(bench_remove_temp);
    } else {
        if (mkdir(dir, 0750) != 0 && errno != EEXIST) {
            bench_die("cannot create %s: %s", dir, strerror(errno));
        }
        b.dir = xstrndup(dir, strlen(dir));
    }

    printf("levels-bench%s: data in %s%s; lease-write-delay %llu ms\n", b.quick ? " --quick" : "", b.dir,
           b.dir_is_temp ? " (removed at the end)" : "", (unsigned long long)bench_lease_write_delay_ms);
    bench_header();
    double t0 = bench_now();
    for (int i = 0; i < BENCH_N_PARTS; i++) {
        if (b.only == NULL || strcmp(b.only, bench_parts[i].name) == 0) {
            bench_parts[i].run(&b);
        }
    }
    printf("%d target%s missed; %.1f s in all\n", b.failures, b.failures == 1 ? "" : "s", bench_now() - t0);
    return 0; /* bench_remove_temp removes a temporary --dir */
}
