/*
 * levels/store_deferred.c — files the store deletes once a checkpoint covers
 * them (design-commitlog.md "Where-slot files of recycled segments (s48)" and
 * "A deleted topic's CQ files (s49)"): one list of what is pending, keyed by
 * kind — the where-slot file of a recycled segment (store_checkpoint.c), the
 * CQ files of a deleted topic's queue (topic_cq_retire.c) — each with the
 * least checkpoint B that lets it go: the log's end when the segment was
 * recycled (no batch the redo replays from there writes its slots), one past
 * the log's end when the topic was deleted (the batch of the delete ends past
 * it). Until then an open's redo from an older checkpoint may write the file
 * again, so it must stay.
 *
 * After each finished checkpoint (after_checkpoint) the entries it covers are
 * closed in the redo and their files deleted, a kind at a time; a kind whose
 * delete fails keeps its entries for the next checkpoint. At a clean close,
 * after redo_close (whose checkpoint covers all of them), every pending file
 * is deleted and a failure left to the next open, which deletes every orphan
 * of either kind (store_log_open's slot sweep, topic_cq_sweep_dead).
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "base/alloc.h"

#include <stdint.h>
#include <stdlib.h>

void store_deferred_add(store_t *s, store_deferred_kind_t kind, uint64_t what, uint64_t due)
{
    if (s->ndeferred == s->deferred_cap) {
        s->deferred_cap = s->deferred_cap ? s->deferred_cap * 2 : 64;
        s->deferred = xrealloc(s->deferred, s->deferred_cap * sizeof *s->deferred);
    }
    s->deferred[s->ndeferred++] = (store_deferred_t){ kind, what, due };
}

/* Which topic queues cq_doomed_fn deletes: those pending with due <= b. */
typedef struct queues_due {
    const store_t *s;
    uint64_t b; /* UINT64_MAX: every pending queue */
} queues_due_t;

static int queue_due(void *ctx, uint32_t queue, uint64_t first)
{
    (void)first; /* every file of the queue */
    const queues_due_t *c = ctx;
    for (size_t i = 0; i < c->s->ndeferred; i++) {
        const store_deferred_t *d = &c->s->deferred[i];
        if (d->kind == STORE_DEFERRED_TOPIC_CQ && d->what == queue) {
            return d->due <= c->b;
        }
    }
    return 0;
}

/* The entries of kind with due <= b: their count, and with bases not NULL
 * their `what`s into bases. */
static size_t count_due(const store_t *s, store_deferred_kind_t kind, uint64_t b, uint64_t *bases)
{
    size_t n = 0;
    for (size_t i = 0; i < s->ndeferred; i++) {
        if (s->deferred[i].kind == kind && s->deferred[i].due <= b) {
            if (bases != NULL) {
                bases[n] = s->deferred[i].what;
            }
            n++;
        }
    }
    return n;
}

void store_deferred_sweep(store_t *s)
{
    uint64_t b = redo_checkpointed(s->redo);
    int swept[2] = { 0, 0 }; /* by kind: 1 when its due entries were deleted */
    char why[512];
    size_t nslots = count_due(s, STORE_DEFERRED_SLOTS, b, NULL);
    if (nslots > 0) {
        uint64_t *bases = xmalloc(nslots * sizeof *bases);
        count_due(s, STORE_DEFERRED_SLOTS, b, bases);
        swept[STORE_DEFERRED_SLOTS] = redo_slots_sweep(s->redo, bases, nslots, NULL, why, sizeof why) == 0;
        free(bases);
    }
    queues_due_t c = { s, b };
    uint64_t removed;
    if (count_due(s, STORE_DEFERRED_TOPIC_CQ, b, NULL) > 0) {
        swept[STORE_DEFERRED_TOPIC_CQ] = redo_queues_remove(s->redo, queue_due, &c, &removed, why, sizeof why) == 0;
    }
    size_t kept = 0; /* a failed delete: the next checkpoint tries again */
    for (size_t i = 0; i < s->ndeferred; i++) {
        if (s->deferred[i].due > b || !swept[s->deferred[i].kind]) {
            s->deferred[kept++] = s->deferred[i];
        }
    }
    s->ndeferred = kept;
}

void store_deferred_sweep_closed(store_t *s)
{
    queues_due_t c = { s, UINT64_MAX };
    uint64_t removed;
    for (size_t i = 0; i < s->ndeferred; i++) {
        if (s->deferred[i].kind == STORE_DEFERRED_SLOTS) {
            (void)slot_file_remove(s->path, s->deferred[i].what, NULL, 0);
        }
    }
    if (count_due(s, STORE_DEFERRED_TOPIC_CQ, UINT64_MAX, NULL) > 0) {
        (void)cq_remove_queues(s->path, queue_due, &c, &removed, NULL, 0); /* a failure: the next open's */
    }
    s->ndeferred = 0;
}
