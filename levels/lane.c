/*
 * levels/lane.c — the remainder lane's min-heap and its load at open from the
 * lane CQ's window (contract in lane.h; docs/design-commitlog.md §4, §6).
 *
 * Two structures, one per question:
 *   - which entry leaves next: a 4-ary min-heap of lane_entry_t (24 bytes) in
 *     one array, ordered by (due, id, cq_index), sifted with a hole (one copy
 *     per level, not a swap). It doubles when full, never past max_entries.
 *     Four children, not two: at 440 000 entries (10 MiB, past the caches) a
 *     pop walks 10 levels instead of 19, and the four children of a node lie
 *     together (96 bytes); that costs more compares (levels-bench --only lane:
 *     917 instructions a push + pop against 844, but 11.6 D1 misses against
 *     17.4 and 337 ns against 608, medians of three runs interleaved).
 *   - how far the CQ's head may move: a ring of bits, one per CQ index in
 *     [head, tail), set when that index's entry left the heap (popped or
 *     dropped). The head steps over set bits (a whole word at a time when it
 *     is all ones), clearing them, so a word that comes round again starts
 *     at zero. The ring holds the words from head's to tail's and doubles
 *     when a push needs one more.
 * Pushes take CQ indexes in order with no gap, which is what makes one bit per
 * index enough: an index in [head, tail) is either in the heap or done.
 *
 * Invariants: size <= cap <= max_entries; head <= tail; tail - head - size is
 * the number of set bits in the ring; the heap property holds between calls.
 * Threads: the storage thread only; no locks.
 */
#include "levels/lane.h"
#include "base/alloc.h"
#include "base/err.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define LANE_INITIAL_ENTRIES 1024
#define LANE_INITIAL_WORDS   64   /* done bits for 4096 indexes */
#define LANE_LOAD_RUN        1024 /* entries a cq_read at load */
#define LANE_ARITY           4    /* children a heap node has */

struct lane {
    lane_entry_t *heap;
    size_t size, cap, max_entries;
    uint64_t *done;    /* ring of done bits; word w of the index space at done[w & (done_words - 1)] */
    size_t done_words; /* a power of two */
    uint64_t head, tail;
};

static int entry_before(const lane_entry_t *a, const lane_entry_t *b)
{
    if (a->due != b->due) {
        return a->due < b->due;
    }
    if (a->id != b->id) {
        return a->id < b->id;
    }
    return a->cq_index < b->cq_index;
}

static lane_t *lane_alloc(uint64_t head, size_t max_entries, size_t cap)
{
    lane_t *l = xcalloc(1, sizeof *l);
    l->max_entries = max_entries;
    l->cap = cap < 1 ? 1 : cap;
    l->heap = xmalloc(l->cap * sizeof *l->heap);
    l->done_words = LANE_INITIAL_WORDS;
    l->done = xcalloc(l->done_words, sizeof *l->done);
    l->head = l->tail = head;
    return l;
}

lane_t *lane_new(uint64_t head, size_t max_entries)
{
    return lane_alloc(head, max_entries, max_entries < LANE_INITIAL_ENTRIES ? max_entries : LANE_INITIAL_ENTRIES);
}

void lane_free(lane_t *l)
{
    if (l == NULL) {
        return;
    }
    free(l->heap);
    free(l->done);
    free(l);
}

/* ---- done bits -------------------------------------------------------------- */

static uint64_t *done_word(const lane_t *l, uint64_t index)
{
    return &l->done[(index >> 6) & (l->done_words - 1)];
}

/* Make room for the word of index tail: the ring must hold the words of
 * [head, tail] at their ring positions. */
static void done_reserve_tail(lane_t *l)
{
    uint64_t first = l->head >> 6, last = l->tail >> 6;
    if (last - first < l->done_words) {
        return;
    }
    size_t words = l->done_words;
    while (last - first >= words) {
        words *= 2;
    }
    uint64_t *ring = xcalloc(words, sizeof *ring);
    for (uint64_t i = l->head; i < l->tail; i = (i | 63) + 1) { /* each word holding an index of [head, tail) */
        ring[(i >> 6) & (words - 1)] = *done_word(l, i);
    }
    free(l->done);
    l->done = ring;
    l->done_words = words;
}

/* Index `index` (in [head, tail)) left the heap; step the head over done indexes. */
static void done_mark(lane_t *l, uint64_t index)
{
    *done_word(l, index) |= UINT64_C(1) << (index & 63);
    while (l->head < l->tail) {
        uint64_t *w = done_word(l, l->head);
        if ((l->head & 63) == 0 && l->tail - l->head >= 64 && *w == UINT64_MAX) {
            *w = 0;
            l->head += 64;
            continue;
        }
        uint64_t bit = UINT64_C(1) << (l->head & 63);
        if ((*w & bit) == 0) {
            break;
        }
        *w &= ~bit;
        l->head++;
    }
}

/* ---- the heap ---------------------------------------------------------------- */

static void sift_up(lane_entry_t *heap, size_t at, lane_entry_t e)
{
    while (at > 0) {
        size_t parent = (at - 1) / LANE_ARITY;
        if (!entry_before(&e, &heap[parent])) {
            break;
        }
        heap[at] = heap[parent];
        at = parent;
    }
    heap[at] = e;
}

static void sift_down(lane_entry_t *heap, size_t size, size_t at, lane_entry_t e)
{
    for (;;) {
        size_t first = LANE_ARITY * at + 1, child = first;
        if (first >= size) {
            break;
        }
        size_t end = size - first < LANE_ARITY ? size : first + LANE_ARITY;
        for (size_t c = first + 1; c < end; c++) {
            if (entry_before(&heap[c], &heap[child])) {
                child = c;
            }
        }
        if (!entry_before(&heap[child], &e)) {
            break;
        }
        heap[at] = heap[child];
        at = child;
    }
    heap[at] = e;
}

int lane_push(lane_t *l, uint64_t due, uint64_t id, uint64_t cq_index, char *err, size_t errlen)
{
    if (cq_index != l->tail) {
        return err_set(err, errlen, "lane: push at CQ index %" PRIu64 ", expected the lane's tail %" PRIu64, cq_index,
                       l->tail);
    }
    if (id == 0) {
        return err_set(err, errlen, "lane: push at CQ index %" PRIu64 ": id 0 is not a message", cq_index);
    }
    if (l->size == l->max_entries) {
        return err_set(err, errlen, "lane: full at %zu entries (max %zu): push at CQ index %" PRIu64 " refused",
                       l->size, l->max_entries, cq_index);
    }
    if (l->size == l->cap) {
        size_t cap = l->cap > l->max_entries / 2 ? l->max_entries : l->cap * 2;
        l->heap = xrealloc(l->heap, cap * sizeof *l->heap);
        l->cap = cap;
    }
    done_reserve_tail(l);
    lane_entry_t e = { .due = due, .id = id, .cq_index = cq_index };
    sift_up(l->heap, l->size++, e);
    l->tail++;
    return 0;
}

int lane_peek(const lane_t *l, lane_entry_t *out)
{
    if (l->size == 0) {
        return 0;
    }
    *out = l->heap[0];
    return 1;
}

int lane_pop(lane_t *l, lane_entry_t *out)
{
    if (l->size == 0) {
        return 0;
    }
    lane_entry_t top = l->heap[0];
    l->size--;
    if (l->size > 0) {
        sift_down(l->heap, l->size, 0, l->heap[l->size]);
    }
    done_mark(l, top.cq_index);
    if (out != NULL) {
        *out = top;
    }
    return 1;
}

int lane_next_live(lane_t *l, lane_check_fn check, void *ctx, lane_entry_t *out, char *err, size_t errlen)
{
    while (l->size > 0) {
        int verdict = check(ctx, &l->heap[0], err, errlen);
        if (verdict == LANE_LIVE) {
            *out = l->heap[0];
            return 1;
        }
        if (verdict != LANE_DEAD) {
            return err_prefix(err, errlen, "lane: check of id %" PRIu64 " at CQ index %" PRIu64, l->heap[0].id,
                              l->heap[0].cq_index);
        }
        lane_pop(l, NULL);
    }
    return 0;
}

size_t lane_size(const lane_t *l)
{
    return l->size;
}

uint64_t lane_head(const lane_t *l)
{
    return l->head;
}

uint64_t lane_tail(const lane_t *l)
{
    return l->tail;
}

size_t lane_bytes(const lane_t *l)
{
    return sizeof *l + l->cap * sizeof *l->heap + l->done_words * sizeof *l->done;
}

/* ---- load at open ------------------------------------------------------------- */

int lane_load(cq_t *q, size_t max_entries, lane_t **out, char *err, size_t errlen)
{
    *out = NULL;
    uint64_t head = cq_head(q), tail = cq_tail(q);
    if (tail - head > max_entries) {
        return err_set(err, errlen,
                       "lane load: the lane CQ's window [%" PRIu64 ", %" PRIu64 ") holds %" PRIu64
                       " entries, more than the lane's max %zu",
                       head, tail, tail - head, max_entries);
    }
    /* One allocation for the whole window; the ring grows on its own. */
    lane_t *l = lane_alloc(head, max_entries, (size_t)(tail - head));
    cq_entry_t run[LANE_LOAD_RUN];
    for (uint64_t at = head; at < tail;) {
        size_t n = tail - at < LANE_LOAD_RUN ? (size_t)(tail - at) : LANE_LOAD_RUN;
        if (cq_read(q, at, n, run, err, errlen) != 0) {
            lane_free(l);
            return err_prefix(err, errlen, "lane load [%" PRIu64 ", %" PRIu64 ")", head, tail);
        }
        for (size_t i = 0; i < n; i++) {
            if (lane_push(l, run[i].due, run[i].log_offset, at + i, err, errlen) != 0) {
                lane_free(l);
                return err_prefix(err, errlen, "lane load [%" PRIu64 ", %" PRIu64 ")", head, tail);
            }
        }
        at += n;
    }
    *out = l;
    return 0;
}
