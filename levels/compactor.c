/*
 * levels/compactor.c — LevelDB range compactions off the owner's thread (see
 * compactor.h).
 *
 * A fixed ring of COMPACTOR_QUEUE ranges under one mutex, and a flag for a
 * memtable write-out (at most one waits: a second would write the same
 * memtable); the thread takes the write-out first, else the oldest range,
 * runs it with the mutex released, and counts it done. compactor_wait waits
 * on that count reaching what was queued.
 *
 * Threading: the ring and the counters are shared under mu. The thread is
 * joined by compactor_free (store_close, before the database closes).
 *
 * valgrind's "288 bytes possibly lost" with compactor_new's pthread_create
 * in its stack, at any broker exit, is not this thread: it is the thread
 * descriptor's TLS vector (glibc's allocate_dtv) of LevelDB's own
 * background-compaction thread. compactor_free joins this thread and glibc
 * keeps its stack, descriptor and vector in its stack cache; store_close's
 * last leveldb_compact_range (when nothing scheduled one before) then makes
 * LevelDB start its background thread (detached, never stopped: its Env is
 * a process-long singleton), which glibc gives the cached stack, so the
 * block is counted to the call that first allocated it. That thread is
 * still alive at exit and its descriptor points one entry into the block
 * (glibc keeps &dtv[1]), hence "possibly".
 * With GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0 the same block is
 * reported from LevelDB's std::thread under leveldb_compact_range instead,
 * and so it is, under compactor_main, when a memtable write-out queued here
 * (compactor_flush_memtable) is the first work LevelDB starts that thread
 * for (test_store_open, "a checkpoint has a long LevelDB log written out").
 * One block per process, not growing: not a leak of ours.
 */
#include "levels/compactor.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

#define COMPACTOR_QUEUE 64 /* ranges waiting at most; a queue's range is asked again later */

/* The range of a memtable write-out: one key above every key of the layout
 * (levels/keys.h: each begins with an ASCII tag), so no table overlaps it. */
static const char past_every_key[] = { (char)0xff };

typedef struct range {
    char *start, *limit;
    size_t start_len, limit_len;
} range_t;

struct compactor {
    leveldb_t *db;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work; /* a range was queued, or stop */
    pthread_cond_t done; /* a range was compacted */
    range_t ring[COMPACTOR_QUEUE];
    int head, n;
    int flush_wanted; /* a memtable write-out is queued */
    uint64_t queued, compacted;
    int stop;
};

static void *compactor_main(void *arg)
{
    compactor_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->n == 0 && !c->flush_wanted && !c->stop) {
            pthread_cond_wait(&c->work, &c->mu);
        }
        if (c->stop) {
            break;
        }
        if (c->flush_wanted) {
            c->flush_wanted = 0;
            pthread_mutex_unlock(&c->mu);
            leveldb_compact_range(c->db, past_every_key, sizeof past_every_key, past_every_key, sizeof past_every_key);
            pthread_mutex_lock(&c->mu);
            c->compacted++;
            pthread_cond_broadcast(&c->done);
            continue;
        }
        range_t r = c->ring[c->head];
        c->head = (c->head + 1) % COMPACTOR_QUEUE;
        c->n--;
        pthread_mutex_unlock(&c->mu);
        leveldb_compact_range(c->db, r.start, r.start_len, r.limit, r.limit_len);
        free(r.start);
        free(r.limit);
        pthread_mutex_lock(&c->mu);
        c->compacted++;
        pthread_cond_broadcast(&c->done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

compactor_t *compactor_new(leveldb_t *db, char *err, size_t errlen)
{
    compactor_t *c = xcalloc(1, sizeof *c);
    c->db = db;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->work, NULL);
    pthread_cond_init(&c->done, NULL);
    int rc = pthread_create(&c->thread, NULL, compactor_main, c);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the compaction thread: %s", strerror(rc));
        pthread_cond_destroy(&c->done);
        pthread_cond_destroy(&c->work);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return NULL;
    }
    return c;
}

static char *copy_key(const char *k, size_t len)
{
    char *p = xmalloc(len > 0 ? len : 1);
    memcpy(p, k, len);
    return p;
}

int compactor_add(compactor_t *c, const char *start, size_t start_len, const char *limit, size_t limit_len)
{
    pthread_mutex_lock(&c->mu);
    int queued = c->n < COMPACTOR_QUEUE;
    if (queued) {
        range_t *r = &c->ring[(c->head + c->n) % COMPACTOR_QUEUE];
        *r = (range_t){ copy_key(start, start_len), copy_key(limit, limit_len), start_len, limit_len };
        c->n++;
        c->queued++;
        pthread_cond_signal(&c->work);
    }
    pthread_mutex_unlock(&c->mu);
    return queued;
}

int compactor_flush_memtable(compactor_t *c)
{
    pthread_mutex_lock(&c->mu);
    int queued = !c->flush_wanted;
    if (queued) {
        c->flush_wanted = 1;
        c->queued++;
        pthread_cond_signal(&c->work);
    }
    pthread_mutex_unlock(&c->mu);
    return queued;
}

void compactor_wait(compactor_t *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t want = c->queued;
    while (c->compacted < want) {
        pthread_cond_wait(&c->done, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
}

void compactor_free(compactor_t *c)
{
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    for (int i = 0; i < c->n; i++) {
        range_t *r = &c->ring[(c->head + i) % COMPACTOR_QUEUE];
        free(r->start);
        free(r->limit);
    }
    pthread_cond_destroy(&c->done);
    pthread_cond_destroy(&c->work);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
