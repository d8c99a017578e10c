/*
 * bench/fsync_bench.c — fsync-bench: what the fdatasync an acknowledged SEND
 * waits for costs on this disk, alone and while table-sized files are written
 * beside it, for a log that grows and for one that overwrites blocks already
 * written.
 *
 * Under `fsync always` every SEND reply waits for an fdatasync of LevelDB's
 * write-ahead log (broker/syncer.c), and while messages flow LevelDB writes
 * its memtable out as a table (write-buffer-size, 64 MiB by default) and
 * compacts tables on the same disk. The mixed benchmark shows that fsync's
 * p99 at 25-50 ms during a flood, against well under a millisecond on an idle
 * disk (docs/BENCH-broker.md). This program measures that limit without the
 * broker, so the broker's figure can be read against it:
 *
 *   append     the log grows: write(2) of --chunk bytes at the end, then
 *              fdatasync — LevelDB's log, whose every fdatasync must also
 *              commit the file's new size (on ext4 a journal commit, which in
 *              ordered mode first writes other files' newly allocated data);
 *   overwrite  the same writes into a file written in full and fsynced
 *              before (a ring of --ring MiB): no size or allocation change, so
 *              fdatasync writes the data alone — what a log on reused,
 *              pre-written segments would wait for.
 * Each runs alone, then beside a thread writing --big MiB files one after
 * another (1 MiB write(2)s, an fdatasync at each file's end, as LevelDB
 * writes a table), for --seconds each. Printed per case: fsyncs, fsyncs/s,
 * p50/p90/p99/max in ms. Figures only: never fails on slowness; the exit
 * status is non-zero only when a file call fails (CONTRIBUTING.md,
 * "Benchmarks").
 *
 * Usage: fsync-bench [--dir PATH] [--quick] [--seconds N] [--chunk KIB]
 *                    [--big MIB] [--ring MIB]
 * Files go in a mkdtemp directory under --dir (default $TMPDIR or /tmp: use a
 * directory on the disk the broker's data directory is on), removed at exit.
 */
#define _GNU_SOURCE
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROGRAM "fsync-bench"
#define MIB     (1024L * 1024L)
#define MAX_BIG 4        /* big files kept at once (rewritten in turn) */
#define LAT_CAP 4000000L /* latency samples kept per case */

typedef struct opts {
    const char *dir; /* parent of the scratch directory */
    int seconds;     /* per case */
    long chunk;      /* bytes per log write */
    long big_mib;    /* size of each big file */
    long ring_mib;   /* size of the pre-written ring (overwrite) */
} opts_t;

static char scratch[PATH_MAX]; /* the mkdtemp directory, removed at exit */

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROGRAM ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static void path_in_scratch(char *out, size_t outlen, const char *name)
{
    if ((size_t)snprintf(out, outlen, "%s/%s", scratch, name) >= outlen)
        die("path too long: %s/%s", scratch, name);
}

static void remove_scratch(void)
{
    if (scratch[0] == '\0')
        return;
    char p[PATH_MAX];
    path_in_scratch(p, sizeof p, "log");
    unlink(p);
    for (int i = 0; i < MAX_BIG; i++) {
        char name[32];
        snprintf(name, sizeof name, "big%d", i);
        path_in_scratch(p, sizeof p, name);
        unlink(p);
    }
    rmdir(scratch);
}

/* ---- the table writer beside the log ---------------------------------------------- */

typedef struct big_writer {
    long mib;
    volatile int stop; /* set by the measuring thread; read between 1 MiB writes */
    long files;        /* files written whole */
    char err[PATH_MAX + 128];
} big_writer_t;

static void *big_writer_main(void *arg)
{
    big_writer_t *w = arg;
    char *buf = malloc(MIB);
    if (buf == NULL) {
        snprintf(w->err, sizeof w->err, "out of memory");
        return NULL;
    }
    memset(buf, 0x5a, MIB);
    for (long n = 0; !w->stop; n++) {
        char name[32], p[PATH_MAX];
        snprintf(name, sizeof name, "big%ld", n % MAX_BIG);
        path_in_scratch(p, sizeof p, name);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) {
            snprintf(w->err, sizeof w->err, "cannot create %s: %s", p, strerror(errno));
            break;
        }
        long i = 0;
        for (; i < w->mib && !w->stop; i++) {
            if (write(fd, buf, MIB) != MIB) {
                snprintf(w->err, sizeof w->err, "write to %s failed: %s", p, strerror(errno));
                break;
            }
        }
        if (w->err[0] == '\0' && fdatasync(fd) != 0)
            snprintf(w->err, sizeof w->err, "fdatasync of %s failed: %s", p, strerror(errno));
        close(fd);
        if (w->err[0] != '\0')
            break;
        if (i == w->mib)
            w->files++;
    }
    free(buf);
    return NULL;
}

/* ---- one case ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Open the log for a case: empty (append) or a ring written in full and
 * fsynced (overwrite). */
static int open_log(const opts_t *o, int overwrite)
{
    char p[PATH_MAX];
    path_in_scratch(p, sizeof p, "log");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | (overwrite ? 0 : O_APPEND), 0600);
    if (fd < 0)
        die("cannot create %s: %s", p, strerror(errno));
    if (overwrite) {
        char *zero = calloc(1, MIB);
        if (zero == NULL)
            die("out of memory");
        for (long i = 0; i < o->ring_mib; i++)
            if (write(fd, zero, MIB) != MIB)
                die("cannot write the ring %s: %s", p, strerror(errno));
        free(zero);
        if (fsync(fd) != 0)
            die("fsync of %s failed: %s", p, strerror(errno));
    }
    return fd;
}

static void run_case(const opts_t *o, int overwrite, int beside)
{
    int fd = open_log(o, overwrite);
    char *chunk = malloc((size_t)o->chunk);
    double *lat = malloc(sizeof *lat * LAT_CAP);
    if (chunk == NULL || lat == NULL)
        die("out of memory");
    memset(chunk, 0x11, (size_t)o->chunk);

    big_writer_t w = { .mib = o->big_mib };
    pthread_t th;
    if (beside && pthread_create(&th, NULL, big_writer_main, &w) != 0)
        die("cannot start the writer thread");

    long n = 0, ring = o->ring_mib * MIB;
    off_t off = 0;
    uint64_t end = clock_mono_us() + (uint64_t)o->seconds * 1000000u;
    while (clock_mono_us() < end && n < LAT_CAP) {
        ssize_t wr = overwrite ? pwrite(fd, chunk, (size_t)o->chunk, off) : write(fd, chunk, (size_t)o->chunk);
        if (wr != o->chunk)
            die("write to the log failed: %s", wr < 0 ? strerror(errno) : "short write");
        if (overwrite && (off += o->chunk) + o->chunk > ring)
            off = 0;
        uint64_t t0 = clock_mono_us();
        if (fdatasync(fd) != 0)
            die("fdatasync of the log failed: %s", strerror(errno));
        lat[n++] = (double)(clock_mono_us() - t0) / 1000.0;
    }
    if (beside) {
        w.stop = 1;
        pthread_join(th, NULL);
        if (w.err[0] != '\0')
            die("%s", w.err);
    }
    close(fd);
    qsort(lat, (size_t)n, sizeof *lat, cmp_double);
    char what[96];
    if (beside)
        snprintf(what, sizeof what, "beside %ld MiB files (%ld written)", o->big_mib, w.files);
    else
        snprintf(what, sizeof what, "alone");
    printf("fsync %-9s %-34s %7ld fsyncs %8.0f/s  p50 %6.2f  p90 %6.2f  p99 %6.2f  max %7.2f ms\n",
           overwrite ? "overwrite" : "append", what, n, (double)n / o->seconds, n ? lat[n / 2] : 0.0,
           n ? lat[n * 9 / 10] : 0.0, n ? lat[n * 99 / 100] : 0.0, n ? lat[n - 1] : 0.0);
    fflush(stdout);
    free(chunk);
    free(lat);
}

/* ---- options ------------------------------------------------------------------------- */

static long number_arg(const char *flag, const char *v, long lo, long hi)
{
    char *end;
    errno = 0;
    long x = v == NULL ? 0 : strtol(v, &end, 10);
    if (v == NULL || errno != 0 || end == v || *end != '\0' || x < lo || x > hi)
        die("%s: '%s' is not a number from %ld to %ld", flag, v == NULL ? "" : v, lo, hi);
    return x;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROGRAM " [--dir PATH] [--quick] [--seconds N] [--chunk KIB] [--big MIB] [--ring MIB]\n"
               "  fdatasync latency of a growing (append) and a pre-written (overwrite) log, alone and beside\n"
               "  a thread writing --big MiB files; defaults: 8 s per case, 128 KiB writes, 64 MiB files (the\n"
               "  broker's write-buffer-size), a 256 MiB ring; --quick: 2 s, 16 MiB files, 32 MiB ring.\n"
               "  Files go in a temporary directory under --dir (default $TMPDIR or /tmp), removed at exit.\n");
}

int main(int argc, char **argv)
{
    opts_t o = { .seconds = 8, .chunk = 128 * 1024, .big_mib = 64, .ring_mib = 256 };
    const char *tmp = getenv("TMPDIR");
    o.dir = tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quick") == 0) {
            o.seconds = 2, o.big_mib = 16, o.ring_mib = 32;
        } else if (strcmp(a, "--dir") == 0 && v != NULL) {
            o.dir = v, i++;
        } else if (strcmp(a, "--seconds") == 0) {
            o.seconds = (int)number_arg(a, v, 1, 600), i++;
        } else if (strcmp(a, "--chunk") == 0) {
            o.chunk = number_arg(a, v, 1, 64 * 1024) * 1024, i++;
        } else if (strcmp(a, "--big") == 0) {
            o.big_mib = number_arg(a, v, 1, 4096), i++;
        } else if (strcmp(a, "--ring") == 0) {
            o.ring_mib = number_arg(a, v, 1, 65536), i++;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, PROGRAM ": unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (o.chunk > o.ring_mib * MIB)
        die("--chunk %ld KiB is larger than the --ring of %ld MiB", o.chunk / 1024, o.ring_mib);
    if ((size_t)snprintf(scratch, sizeof scratch, "%s/fsync-bench.XXXXXX", o.dir) >= sizeof scratch)
        die("--dir too long: %s", o.dir);
    if (mkdtemp(scratch) == NULL)
        die("cannot make a directory in %s: %s", o.dir, strerror(errno));
    atexit(remove_scratch);

    printf("== fsync-bench in %s: %ld KiB per write, %d s per case, files beside of %ld MiB, ring %ld MiB\n", o.dir,
           o.chunk / 1024, o.seconds, o.big_mib, o.ring_mib);
    for (int beside = 0; beside <= 1; beside++)
        for (int overwrite = 0; overwrite <= 1; overwrite++)
            run_case(&o, overwrite, beside);
    return 0;
}
