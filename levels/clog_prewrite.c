/*
 * levels/clog_prewrite.c — the commit log's pre-writer: a thread that writes
 * the next spare segment's zeros and syncs them, so that the owner (the
 * broker's storage thread) only gives the finished file its header and name;
 * or, when the next spare is not in the page cache (recycled, found by the
 * open, or its zeros written with O_DIRECT), reads it back into it
 * (contracts in levels/clog_internal.h; clog_prepare_step in clog.c uses
 * it).
 *
 * Why a thread: a segment's pre-write is its size in zeros, then one
 * fdatasync. Done in steps on the storage thread it was 42 % of that thread's
 * samples at the flood's peak (perf, 16 MiB segments, 8 producers and 2
 * consumers: the bench's mixed part), time in which no SEND, move or PULL of
 * the store ran. On its own thread the storage thread only waits for the
 * header's fdatasync, the rename and the directory's fsync when it takes the
 * file.
 *
 * Why O_DIRECT: through the page cache the zeros were the first touch of
 * every page of the segment, on a virtual machine ~10 µs a page (the host
 * backs it then): 37 % of a core in the flood, beside a storage thread that
 * needs a whole one of the two. Written with O_DIRECT the device reads them
 * from one buffer; the file is then not cached, and is read back like a
 * recycled spare (below), which fills the pages by the device's DMA. Every
 * new spare is read back so (clog_seg_finish): where the zeros went through
 * the page cache after all, the read-back finds each chunk cached and reads
 * nothing.
 *
 * Why a read-back: a recycled spare keeps its old data (no zeros), and in a
 * delay queue it was written 30 min or hours ago, so its pages are likely
 * evicted; a spare whose zeros bypassed the page cache was never in it. An
 * append into pages not cached fills them on the storage thread (it no
 * longer reads them: clog_append writes a batch out to its page's end; before
 * that each append read its last page synchronously, 132.6 µs against 5.0
 * once the file was read through: docs/BENCH-broker.md, s52). Reading the
 * spare here, paced like the zeros, does that on this thread. A read dirties
 * nothing: no writeback, no sync.
 *
 * States, under mu: IDLE (no file) → WRITING (the thread owns the file) →
 * READY (whole and synced; the owner takes fd and path) or FAILED (the file
 * removed; the owner takes the error) → IDLE when the owner has taken it.
 * And IDLE → WARMING (the thread reads a spare through warm_fd) → IDLE.
 * Only the owner moves IDLE → WRITING or WARMING (a request) and READY/FAILED
 * → IDLE; only the thread moves WRITING and WARMING on (WARMING leaves
 * nothing to take). The thread touches nothing of the log but its own file
 * and, while WARMING, its own duplicate of a spare's descriptor, which it only
 * preads and then closes: the owner may meanwhile rename the spare, write its
 * header, take it for a switch, append into it or close its descriptor —
 * none of that changes what a pread through another descriptor of the same
 * file does, and a segment's file is never truncated or removed while the
 * log runs — so it needs no lock of the log's. A poll that wants a file
 * while WARMING ends the read-back at its next chunk (write_wanted): the
 * next spare's zeros matter more than pages read ahead.
 *
 * Pacing: pace_ms between 1 MiB chunks (0: back to back; CLOG_PREPARE_HOLD:
 * no chunk until another pace is set, for a disk near full). The owner sets it
 * at each poll; a change, a request or a stop wakes the thread at once. Paced,
 * the chunks' writeback does not queue ahead of the log's own fdatasyncs; a
 * read-back keeps the same pace, its reads sharing the disk with those syncs.
 */
#define _GNU_SOURCE
#include "levels/clog_internal.h"
#include "base/alloc.h"
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* 4096: the alignment O_DIRECT asks of a buffer on any block device this
 * runs on (logical blocks of 512 or 4096 bytes). */
const char clog_zeros[PREWRITE_CHUNK] __attribute__((aligned(4096)));

int clog_zeros_write(int fd, uint64_t from, uint64_t to, int start_writeback, uint64_t *failed_at)
{
    for (uint64_t at = from; at < to; at += PREWRITE_CHUNK) {
        size_t n = to - at < PREWRITE_CHUNK ? (size_t)(to - at) : PREWRITE_CHUNK;
        if (clog_pwrite_all(fd, clog_zeros, n, at) != 0) {
            *failed_at = at;
            return -1;
        }
#ifdef SYNC_FILE_RANGE_WRITE
        if (start_writeback) {
            (void)sync_file_range(fd, (off_t)at, (off_t)n, SYNC_FILE_RANGE_WRITE); /* a hint: the fdatasync decides */
        }
#else
        (void)start_writeback;
#endif
    }
    return 0;
}

/* Is the thread's job to end at its next chunk? A stop; while warming, also
 * a file wanted (a spare to write matters more than pages read ahead). With
 * mu held. */
static int job_cut(const clog_prewriter_t *p)
{
    return p->stop || (p->state == CLOG_PREWRITE_WARMING && p->write_wanted);
}

/* Wait, with mu held, until `ms` have passed or something changed (a new
 * pace, a stop, a cut read-back). */
static void pace_wait(clog_prewriter_t *p, unsigned ms)
{
    uint64_t at = clock_mono_ms() + ms;
    struct timespec until = { (time_t)(at / 1000), (long)(at % 1000) * 1000000L };
    unsigned pace = p->pace_ms;
    while (!job_cut(p) && p->pace_ms == pace && pthread_cond_timedwait(&p->wake, &p->mu, &until) != ETIMEDOUT) {
    }
}

/* Before the chunk at `at` of either job (called without mu): its gap kept
 * (none before the first chunk), a hold waited out. 1 when the job is to end
 * here instead (job_cut). */
static int chunk_wait(clog_prewriter_t *p, uint64_t at)
{
    pthread_mutex_lock(&p->mu);
    p->done = at;
    for (int waited = at == 0; !job_cut(p);) {
        if (p->pace_ms == CLOG_PREPARE_HOLD) {
            pthread_cond_wait(&p->wake, &p->mu); /* held: until another pace, a stop or a cut */
        } else if (!waited && p->pace_ms > 0) {
            pace_wait(p, p->pace_ms); /* its gap, or until a new pace (a hold is seen above) */
            waited = 1;
        } else {
            break;
        }
    }
    int cut = job_cut(p);
    pthread_mutex_unlock(&p->mu);
    return cut;
}

/* One chunk [at, to) of zeros through *direct (an O_DIRECT descriptor of
 * the file) while there is one, else through fd and the page cache. A
 * direct write the filesystem or device refuses as such (EINVAL: O_DIRECT
 * not supported, or an alignment it wants) closes *direct, and the chunk and
 * the rest go through the page cache: 0, or -1 with errno and *failed_at. */
static int zeros_chunk(int fd, int *direct, uint64_t at, uint64_t to, uint64_t *failed_at)
{
    if (*direct >= 0) {
        if (clog_pwrite_all(*direct, clog_zeros, (size_t)(to - at), at) == 0) {
            return 0;
        }
        if (errno != EINVAL) {
            *failed_at = at;
            return -1;
        }
        close(*direct);
        *direct = -1;
    }
    return clog_zeros_write(fd, at, to, 1, failed_at);
}

/* Write the file of one request: 0 with the file whole and synced, or -1
 * with p->error (the file removed); 1 when stopped (the file removed).
 * The zeros go through a second descriptor opened with O_DIRECT where the
 * filesystem takes it: written by the device from one buffer, no page of
 * the page cache filled by this thread's CPU (docs/BENCH-broker.md, s54: on
 * a virtual machine each new page-cache page costs its first touch, ~10 µs,
 * which made the zeros 37 % of a core in the flood). Called without mu. */
static int write_one(clog_prewriter_t *p)
{
    int fd = open(p->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(p->error, sizeof p->error, "cannot create %s: %s", p->path, strerror(errno));
        return -1;
    }
    int direct = open(p->path, O_WRONLY | O_DIRECT | O_CLOEXEC); /* -1 (EINVAL) where O_DIRECT is not taken */
    int rc = 0;
    for (uint64_t at = 0; at < p->size && rc == 0; at += PREWRITE_CHUNK) {
        if (chunk_wait(p, at)) {
            rc = 1;
            break;
        }
        uint64_t to = at + PREWRITE_CHUNK < p->size ? at + PREWRITE_CHUNK : p->size, failed_at = 0;
        if (zeros_chunk(fd, &direct, at, to, &failed_at) != 0) {
            snprintf(p->error, sizeof p->error, "cannot pre-write %s at byte %" PRIu64 ": %s", p->path, failed_at,
                     strerror(errno));
            rc = -1;
        }
    }
    if (direct >= 0) {
        close(direct);
    }
    if (rc == 0 && fdatasync(fd) != 0) { /* the file's size and extents; the direct writes' data is on the device */
        snprintf(p->error, sizeof p->error, "cannot sync the pre-written %s: %s", p->path, strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        close(fd);
        unlink(p->path);
        return rc;
    }
    p->fd = fd;
    return 0;
}

/* Is every page of [at, at + n) of the mapping map cached? 0 also when
 * mincore fails (the chunk is read, as without the check). */
static int chunk_cached(const char *map, uint64_t at, size_t n)
{
    unsigned char vec[PREWRITE_CHUNK / 4096];
    size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = (n + page - 1) / page;
    if (map == NULL || pages > sizeof vec || mincore((void *)(map + at), n, vec) != 0) {
        return 0;
    }
    for (size_t i = 0; i < pages; i++) {
        if (!(vec[i] & 1)) {
            return 0;
        }
    }
    return 1;
}

/* Read the spare at warm_fd through into a scratch buffer (WARMING), chunk by
 * chunk at the pace of the zeros, and close the descriptor; counted as warmed
 * when whole, as a failure when a pread failed or the file ended first (the
 * appends read their pages themselves then, as without this). A chunk whose
 * pages are all cached already (mincore through a read-only mapping, which
 * faults nothing in) is not read: a spare recycled minutes after it was
 * written costs a few system calls, not 64 MiB copied. Called without mu;
 * the state goes back to IDLE in the caller. */
static void warm_one(clog_prewriter_t *p)
{
    char *scratch = NULL; /* allocated at the first chunk read: none for a spare cached whole */
    char *map = mmap(NULL, (size_t)p->size, PROT_READ, MAP_SHARED, p->warm_fd, 0);
    map = map == MAP_FAILED ? NULL : map; /* no mapping: every chunk is read */
    int cut = 0, failed = 0;
    uint64_t read = 0;
    for (uint64_t at = 0; at < p->size && !failed; at += PREWRITE_CHUNK) {
        size_t n = p->size - at < PREWRITE_CHUNK ? (size_t)(p->size - at) : PREWRITE_CHUNK;
        if (chunk_cached(map, at, n)) {
            continue; /* no pace kept either: nothing was read */
        }
        if ((cut = chunk_wait(p, at)) != 0) {
            break;
        }
        scratch = scratch != NULL ? scratch : xmalloc(PREWRITE_CHUNK);
        failed = clog_pread_all(p->warm_fd, scratch, n, at) != 0;
        read += n;
    }
    if (map != NULL) {
        munmap(map, (size_t)p->size);
    }
    free(scratch);
    pthread_mutex_lock(&p->mu);
    close(p->warm_fd);
    p->warm_fd = -1;
    p->warm_failures += (uint64_t)failed;
    p->warmed += (uint64_t)(!failed && !cut);
    p->warm_bytes += read;
    pthread_mutex_unlock(&p->mu);
}

static void *prewriter_main(void *arg)
{
    clog_prewriter_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->state != CLOG_PREWRITE_WRITING && p->state != CLOG_PREWRITE_WARMING) {
            pthread_cond_wait(&p->wake, &p->mu);
        }
        if (p->stop) {
            break;
        }
        if (p->state == CLOG_PREWRITE_WARMING) {
            pthread_mutex_unlock(&p->mu);
            warm_one(p); /* warm_fd is the thread's while WARMING */
            pthread_mutex_lock(&p->mu);
            p->state = CLOG_PREWRITE_IDLE; /* nothing for the owner to take */
            p->write_wanted = 0;
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        int rc = write_one(p); /* the file and the error fields are the thread's while WRITING */
        pthread_mutex_lock(&p->mu);
        if (rc == 1) {
            break; /* stopped half-way: the file is removed */
        }
        p->state = rc == 0 ? CLOG_PREWRITE_READY : CLOG_PREWRITE_FAILED;
        pthread_cond_broadcast(&p->finished);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The thread started if it is not yet, with mu held: 0, or pthread_create's
 * error number. */
static int thread_start_locked(clog_prewriter_t *p)
{
    int rc = p->started ? 0 : pthread_create(&p->thread, NULL, prewriter_main, p);
    p->started = p->started || rc == 0;
    return rc;
}

void clog_prewriter_init(clog_prewriter_t *p, const char *dir, uint64_t size)
{
    memset(p, 0, sizeof *p);
    snprintf(p->path, sizeof p->path, "%s/clog-ffffffffffffffff.seg.new", dir);
    p->size = size;
    p->fd = -1;
    p->warm_fd = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC); /* pace_wait's deadline */
    pthread_cond_init(&p->wake, &a);
    pthread_cond_init(&p->finished, NULL);
    pthread_condattr_destroy(&a);
}

/* Take what the thread finished (READY: *fd; FAILED: err), with mu held:
 * the state it had. */
static int take_locked(clog_prewriter_t *p, int *fd, char *err, size_t errlen)
{
    int state = p->state;
    if (state == CLOG_PREWRITE_READY) {
        *fd = p->fd;
        p->fd = -1;
        p->state = CLOG_PREWRITE_IDLE;
    } else if (state == CLOG_PREWRITE_FAILED) {
        snprintf(err, errlen, "%s", p->error);
        p->state = CLOG_PREWRITE_IDLE;
    }
    return state;
}

int clog_prewriter_finish(clog_prewriter_t *p, int *fd, char *err, size_t errlen)
{
    pthread_mutex_lock(&p->mu);
    if (p->state == CLOG_PREWRITE_WRITING) {
        p->pace_ms = 0; /* the owner waits: no gap, no hold */
        pthread_cond_signal(&p->wake);
        while (p->state == CLOG_PREWRITE_WRITING) {
            pthread_cond_wait(&p->finished, &p->mu);
        }
    }
    int state = take_locked(p, fd, err, errlen);
    pthread_mutex_unlock(&p->mu);
    return state == CLOG_PREWRITE_WARMING ? CLOG_PREWRITE_IDLE : state; /* a read-back is no file */
}

int clog_prewriter_poll(clog_prewriter_t *p, int want, unsigned pace_ms, int *fd, char *err, size_t errlen)
{
    pthread_mutex_lock(&p->mu);
    if (p->pace_ms != pace_ms) {
        p->pace_ms = pace_ms;
        pthread_cond_signal(&p->wake);
    }
    int state = take_locked(p, fd, err, errlen);
    if (state == CLOG_PREWRITE_WARMING && want && !p->write_wanted) {
        p->write_wanted = 1; /* the read-back ends at its next chunk; a later poll begins the file */
        pthread_cond_signal(&p->wake);
    }
    if (state == CLOG_PREWRITE_IDLE && want) {
        int rc = thread_start_locked(p);
        if (rc != 0) {
            snprintf(err, errlen, "cannot start the commit log's pre-writer thread: %s", strerror(rc));
            pthread_mutex_unlock(&p->mu);
            return CLOG_PREWRITE_FAILED;
        }
        p->state = CLOG_PREWRITE_WRITING;
        pthread_cond_signal(&p->wake);
    }
    pthread_mutex_unlock(&p->mu);
    return state == CLOG_PREWRITE_READY || state == CLOG_PREWRITE_FAILED ? state : CLOG_PREWRITE_IDLE;
}

int clog_prewriter_warm(clog_prewriter_t *p, int fd)
{
    pthread_mutex_lock(&p->mu);
    if (p->state != CLOG_PREWRITE_IDLE) {
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0 || thread_start_locked(p) != 0) {
        if (own >= 0) {
            close(own);
        }
        p->warm_failures++;
    } else {
        p->warm_fd = own;
        p->write_wanted = 0;
        p->state = CLOG_PREWRITE_WARMING;
        pthread_cond_signal(&p->wake);
    }
    pthread_mutex_unlock(&p->mu);
    return 1;
}

void clog_prewriter_warm_counts(clog_prewriter_t *p, uint64_t *warmed, uint64_t *bytes, uint64_t *failures)
{
    pthread_mutex_lock(&p->mu);
    *warmed = p->warmed;
    *bytes = p->warm_bytes;
    *failures = p->warm_failures;
    pthread_mutex_unlock(&p->mu);
}

uint64_t clog_prewriter_left(clog_prewriter_t *p)
{
    pthread_mutex_lock(&p->mu);
    uint64_t left = p->state == CLOG_PREWRITE_IDLE || p->state == CLOG_PREWRITE_WARMING ? UINT64_MAX /* no file */
                    : p->state == CLOG_PREWRITE_WRITING                                 ? p->size - p->done
                                                                                        : 0;
    pthread_mutex_unlock(&p->mu);
    return left;
}

void clog_prewriter_stop(clog_prewriter_t *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mu);
    if (p->started) {
        pthread_join(p->thread, NULL);
    }
    if (p->state == CLOG_PREWRITE_READY) { /* whole, never taken: not a segment */
        close(p->fd);
        unlink(p->path);
    }
    if (p->warm_fd >= 0) { /* a read-back handed over that the thread stopped before beginning */
        close(p->warm_fd);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->finished);
}
