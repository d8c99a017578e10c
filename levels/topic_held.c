/*
 * levels/topic_held.c — which of a topic's log entries are still in held
 * batches (design-commitlog.md §3 rule 2: a batch's LevelDB writes wait for
 * the log's sync), so that a walk of the log (topic_walk.c) can read them
 * through the overlay instead of waiting for the sync and the apply (the
 * read barrier).
 *
 * Appends: store_topic_append takes seqs in increasing order per topic and batches
 * are applied in log order, so the held appends of a topic are the newest
 * ones, kept in a list in seq order with the log's end at the time each was
 * put into the pending batch (the mark). That batch ends past the mark and
 * batch ends grow, so once redo_applied is past a mark the entry is in
 * LevelDB: the list is cut from its front. A mark that stays behind (a batch
 * written beside the log, applied without redo_applied moving) only keeps an
 * entry a little longer: the walk's point read then finds it in LevelDB.
 *
 * applied_below bounds what LevelDB holds of the topic: nothing at or above
 * it but entries still in the list (seqs grow, and an entry leaves the list
 * only once applied, raising it), so a walk from there needs no seek, and a
 * walk below it never steps past its last entry under it into the keys
 * after the topic's range (a seek or step there skips every tombstone up to
 * the next live key: the GC's 'X' deletes, one per message, until compacted).
 *
 * Deletes ('T' keys deleted by REVOKE, the GC, a purge) may name any seq, so
 * they are not listed: the store keeps one mark, the log's end at the last
 * one, and while it may be held a walk asks the overlay about each key
 * LevelDB gives it.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

/* The log's end now: a write put into the pending batch lands in a batch
 * that ends past it. */
static uint64_t log_mark(const store_t *s)
{
    return clog_end(redo_log(s->redo));
}

/* 1 when the batch holding a write marked `mark` has been applied. */
static int applied_past(const store_t *s, uint64_t mark)
{
    return redo_applied(s->redo) > mark;
}

/* The first n of h's appends are in LevelDB: out of the list, and
 * applied_below raised past them. */
static void applied_up_to(topic_held_t *h, size_t n)
{
    if (h->puts[n - 1].seq >= h->applied_below) {
        h->applied_below = h->puts[n - 1].seq + 1;
    }
    memmove(h->puts, h->puts + n, (h->n - n) * sizeof *h->puts);
    h->n -= n;
}

void topic_held_note(store_t *s, topic_state_t *t, uint64_t seq)
{
    if (s->redo == NULL) {
        return;
    }
    topic_held_t *h = &t->held;
    if (h->n > 0 && applied_past(s, h->puts[h->n - 1].mark)) {
        applied_up_to(h, h->n); /* all of them applied: the list starts again */
    }
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->puts = xrealloc(h->puts, h->cap * sizeof *h->puts);
    }
    h->puts[h->n++] = (struct topic_held_put){ seq, log_mark(s) };
}

void topic_held_note_delete(store_t *s)
{
    if (s->redo != NULL) {
        s->topic_del_mark = log_mark(s) + 1; /* 0 stays "none" */
    }
}

int topic_held_deletes(const store_t *s)
{
    return s->redo != NULL && s->topic_del_mark != 0 && !applied_past(s, s->topic_del_mark - 1);
}

size_t topic_held_prune(store_t *s, topic_state_t *t)
{
    topic_held_t *h = &t->held;
    if (s->redo == NULL || h->n == 0) {
        return h->n;
    }
    size_t gone = 0;
    while (gone < h->n && applied_past(s, h->puts[gone].mark)) {
        gone++;
    }
    if (gone > 0) {
        applied_up_to(h, gone);
    }
    return h->n;
}

void topic_held_free(topic_held_t *h)
{
    free(h->puts);
    h->puts = NULL;
    h->n = h->cap = 0;
}
