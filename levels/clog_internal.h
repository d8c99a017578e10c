/*
 * levels/clog_internal.h — what the commit log's files share (clog.c: its
 * segments; clog_append.c: batches appended and synced; clog_read.c: records
 * read and walked; clog_open.c: the open and its end rule; clog_prewrite.c:
 * the pre-writer). Private to levels/.
 * The byte layout is described atop clog.c. Owner thread unless a function
 * says otherwise; every function that fails writes err naming file and offset.
 */
#ifndef HG_LEVELS_CLOG_INTERNAL_H
#define HG_LEVELS_CLOG_INTERNAL_H

#include "levels/clog.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SEG_MAGIC        "HGCLOGS1"
#define PREWRITE_CHUNK   (1u << 20)
#define SCAN_CHUNK       (4u << 20)
#define COMMIT_FOOTPRINT (CLOG_RECORD_HEADER + CLOG_COMMIT_PAYLOAD)
#define RECORD_DAMAGED   2 /* clog_record_read: a record of this life that fails its CRC (err says where) */

/* The pre-writer (clog_prewrite.c): a thread that writes the next spare's
 * zeros, or reads a recycled spare back into the page cache. Its fields are
 * under mu; the file and error are the thread's while WRITING, the owner's to
 * take when READY or FAILED; warm_fd is the thread's while WARMING. */
enum {
    CLOG_PREWRITE_IDLE,
    CLOG_PREWRITE_WRITING,
    CLOG_PREWRITE_READY,
    CLOG_PREWRITE_FAILED,
    CLOG_PREWRITE_WARMING /* reading a spare through warm_fd; back to IDLE by the thread (nothing to take) */
};
typedef struct clog_prewriter {
    pthread_mutex_t mu;
    pthread_cond_t wake;     /* a request, a new pace, a stop */
    pthread_cond_t finished; /* WRITING became READY or FAILED */
    pthread_t thread;
    int started, stop, state;
    unsigned pace_ms;
    uint64_t size;
    uint64_t done;          /* WRITING: bytes of the file written so far */
    int fd;                 /* READY: the whole, synced file at path */
    int warm_fd;            /* WARMING: the thread's own duplicate of the spare's descriptor, closed by the thread */
    int write_wanted;       /* WARMING: a poll wants a file written: the read-back stops at its next chunk */
    uint64_t warmed;        /* spares read back whole (their cached chunks skipped) */
    uint64_t warm_bytes;    /* bytes those read-backs read: the chunks not wholly cached */
    uint64_t warm_failures; /* read-backs a dup or a pread failed (harmless: an append reads its page itself) */
    char path[PATH_MAX];
    char error[PATH_MAX + 128]; /* FAILED: why, naming path and the byte */
} clog_prewriter_t;

typedef struct seg {
    uint64_t base, life;
    int fd;
    int spare;     /* 1: holds no batch of this log (pre-written, recycled, or cut) */
    int abandoned; /* 1: a sync of it failed (clog_abandon): never synced or appended to again */
    int resident;  /* spare: 1 once read back (warmed), 0 while its pages may not be cached (new: its zeros may
                      have bypassed the page cache; recycled; found by the open): clog_prepare_step reads the next
                      such spare back before a switch takes it, skipping what is cached */
} seg_t;

struct clog {
    char *dir;
    uint64_t size;
    uint64_t page; /* the page size: an append is written out to its last page's end (clog_append) */
    seg_t *segs;   /* sorted by base; mutated by the owner under lock, read by the syncer under lock */
    size_t nsegs, cap;
    pthread_mutex_t lock;
    uint64_t end;               /* where the next batch goes (its segment may not exist yet) */
    uint64_t tail;              /* the end of the last whole batch: the next COMMIT's "previous end" */
    uint64_t must_reach;        /* clog_options_t's, for the open */
    uint64_t chain_from;        /* clog_options_t's, for the open */
    uint64_t clean_end;         /* clog_options_t's, for the open */
    _Atomic uint64_t keep_from; /* clog_recycle refuses a segment not wholly below this (UINT64_MAX: no bound,
                                   clog_keep_from never called); set by any thread, read by the owner */
    _Atomic uint64_t written, durable;
    int write_errno;              /* clog_write_errno: the owner's last failed write system call (owner thread only) */
    clog_prewriter_t pre;         /* clog_prepare_step's: the thread writing the next spare */
    uint64_t step_refused_seg;    /* a step failed while the log's end was in this segment: none until it leaves */
    uint64_t spare_rechecked_seg; /* the log end's segment in whose second half clog_prepare_step read the next
                                     spare back again (what was evicted since its first read-back): once a segment */
    char switch_failure[PATH_MAX + 256]; /* the pre-writer's failure a segment switch met (it wrote its segment
                                            itself): reported by the next clog_prepare_step; "" none */
    /* A failed fdatasync stays failed until clog_abandon (fsyncgate: a second fdatasync through the same
       descriptor reports success over pages the kernel may have dropped). sync_lock serializes clog_sync, so no
       sync can take that success while another reports the error; the three below are under it. */
    pthread_mutex_t sync_lock;
    int sync_failed;      /* 1: a clog_sync failed and clog_abandon has not run since */
    int sync_errno;       /* that fdatasync's errno */
    char sync_error[384]; /* that clog_sync's err */
};

typedef struct hdr {
    uint32_t crc, len, delta;
    int type;
    uint64_t offset, life;
} hdr_t;

typedef struct commit_info {
    uint64_t d, prev;
    uint32_t records, crc;
} commit_info_t;

static inline uint64_t pad8(uint64_t n)
{
    return (n + 7) & ~UINT64_C(7);
}

static inline uint64_t seg_base_of(const clog_t *c, uint64_t off)
{
    return off - off % c->size;
}

static inline uint64_t first_pos(uint64_t base)
{
    return base + CLOG_SEGMENT_HEADER;
}

/* The path of the segment at base: dir/clog-<16 hex>.seg. */
void clog_seg_path(const clog_t *c, uint64_t base, char *p, size_t n);

/* The segment whose base is base, or NULL (owner thread, or under c->lock). */
seg_t *clog_seg_find(clog_t *c, uint64_t base);

/* The spare a segment switch takes: the lowest (spares left below the log's
 * end, after a reopen at a later clock, go before those past it, so none is
 * left behind for good), or NULL when none waits. Owner thread. */
seg_t *clog_next_spare(const clog_t *c);

/* qsort's order of segments: by base. */
int clog_seg_cmp(const void *a, const void *b);

/* Add a segment and keep the array sorted, under c->lock. */
void clog_seg_insert(clog_t *c, seg_t s);

/* pwrite/pread of all n bytes at `at` (EINTR retried): 0, or -1 with errno;
 * clog_pread_all returns 1 when the file ends first. */
int clog_pwrite_all(int fd, const void *p, size_t n, uint64_t at);
int clog_pread_all(int fd, void *p, size_t n, uint64_t at);

/* PREWRITE_CHUNK zero bytes, aligned for O_DIRECT (clog_prewrite.c). */
extern const char clog_zeros[PREWRITE_CHUNK];

/* Zeros into fd over [from, to) in PREWRITE_CHUNK writes; with
 * start_writeback each chunk's writeback is started at once
 * (sync_file_range), so that the file's one fdatasync, later, finds its pages
 * mostly on disk. 0, or -1 with errno and *failed_at (the failed chunk's
 * offset). Any thread. */
int clog_zeros_write(int fd, uint64_t from, uint64_t to, int start_writeback, uint64_t *failed_at);

/* The pre-writer of the log whose directory is dir and segments size bytes:
 * set up idle; its thread starts at the first request. */
void clog_prewriter_init(clog_prewriter_t *p, const char *dir, uint64_t size);

/* The owner's look at the pre-writer, with the pace it is to keep
 * (milliseconds between its 1 MiB chunks; 0: back to back).
 * CLOG_PREWRITE_READY: *fd is a whole, synced file of zeros at p->path, now
 * the caller's (its zeros written with O_DIRECT where the filesystem takes
 * it, so not cached). CLOG_PREWRITE_FAILED: err says why (the file is removed).
 * Otherwise CLOG_PREWRITE_IDLE, and when it was idle and want is set, a file
 * is begun; when it was reading a spare back (clog_prewriter_warm) and want
 * is set, the read-back ends at its next chunk, and a later poll begins the
 * file. Owner thread. */
int clog_prewriter_poll(clog_prewriter_t *p, int want, unsigned pace_ms, int *fd, char *err, size_t errlen);

/* The file being written, finished now for a segment switch that found no
 * spare (cheaper than a second whole file beside it, and on a disk near full
 * the only room there is): its pace set to 0, a hold lifted, waited for.
 * CLOG_PREWRITE_READY with *fd, CLOG_PREWRITE_FAILED with err, or
 * CLOG_PREWRITE_IDLE when none was begun. Owner thread. */
int clog_prewriter_finish(clog_prewriter_t *p, int *fd, char *err, size_t errlen);

/* Have the thread read the spare whose descriptor is fd through, 1 MiB a
 * chunk at the pace of the zeros (into a scratch buffer: no dirty page, no
 * writeback), so that a switch that takes it appends into cached pages
 * instead of reading each batch's last page from disk. The thread reads
 * through its own duplicate of fd (fcntl F_DUPFD_CLOEXEC) and closes it: the
 * owner may rename, write, take or close the spare meanwhile. 1 when it was
 * handed over, or the duplicate failed (counted in warm_failures: not worth
 * asking again); 0 when the thread is busy (not IDLE): ask at a later poll.
 * A read that fails ends the read-back, counted, logged nowhere. Owner
 * thread. */
int clog_prewriter_warm(clog_prewriter_t *p, int fd);

/* Spares read back whole, the bytes read for them (chunks not wholly cached:
 * a chunk whose pages are all in the page cache is skipped), and read-backs
 * that failed (a dup or a pread). Any thread. */
void clog_prewriter_warm_counts(clog_prewriter_t *p, uint64_t *warmed, uint64_t *bytes, uint64_t *failures);

/* Bytes the file being written still needs (as of its last chunk); 0 when it
 * is whole or failed, not yet taken; UINT64_MAX when none is begun. */
uint64_t clog_prewriter_left(clog_prewriter_t *p);

/* Stop the thread (at its next chunk) and join it; a file it was writing, or
 * finished and nobody took, is removed; a read-back ends (its descriptor
 * closed). Owner thread, once. */
void clog_prewriter_stop(clog_prewriter_t *p);

/* A write system call of the owner failed (errno says why): its errno kept
 * for clog_write_errno and the message "<what>: <strerror>" in err. -1. */
int clog_write_failed(clog_t *c, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Pre-write a segment at base (zeros, header, synced, renamed into place) and
 * add it as a spare. 0, or -1 with err. */
int clog_seg_create(clog_t *c, uint64_t base, char *err, size_t errlen);

/* The wholly pre-written file fd at tmp becomes the spare at base: a header
 * with a new life, the file synced, renamed into place, the directory synced,
 * added as a spare not resident (read back before a switch takes it; what
 * is cached is skipped). On failure fd is closed and tmp removed; -1 with
 * err. */
int clog_seg_finish(clog_t *c, int fd, const char *tmp, uint64_t base, char *err, size_t errlen);

/* fsync the log's directory: 0, or -1 with err. */
int clog_sync_dir(const clog_t *c, char *err, size_t errlen);

/* A random segment life (getrandom). */
uint64_t clog_new_life(void);

/* Encode a segment header into h[CLOG_SEGMENT_HEADER]; write one into fd
 * and fdatasync it (path names the file in err). */
void clog_header_encode(char *h, uint64_t base, uint64_t life, uint64_t size);
int clog_header_write(clog_t *c, int fd, uint64_t base, uint64_t life, const char *path, char *err, size_t errlen);

/* Decode the record header at p; 1 when it could be the record at off of s
 * (offset, life, type, zero bytes, length agree; the CRC is checked by
 * clog_record_read). */
int clog_hdr_plausible(const clog_t *c, const seg_t *s, const char *p, uint64_t off, hdr_t *h);

/* Read and check the record at off of s into rd: 0 with *r; CLOG_NOT_RECORD;
 * RECORD_DAMAGED with err (a record of this life failing its CRC); -1 with
 * err on I/O. */
int clog_record_read(clog_t *c, seg_t *s, uint64_t off, clog_reader_t *rd, clog_record_t *r, char *err, size_t errlen);

#endif
