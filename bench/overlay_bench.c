/*
 * bench/overlay_bench.c — overlay-bench: the readers' view of held writes
 * (levels/clog_overlay.h) alone, in the shape `levels-bench --only cycle
 * --lease-write-delay 100` gives it (counted there: 680 batches, 200 000 CQ
 * entries, 400 000 where-slots, 601 661 puts and 562 498 deletes, at most 23
 * batches and 87 045 places held, 212 480 CQ and as many slot lookups of which
 * 0.5 % find a held place).
 *
 * Each step builds one batch's derived-writes record (outside the timed
 * part): per message one CQ entry (4 queues, indices in order), two
 * where-slots (ordinals in order), three puts (keys of 20, 24 and 32 bytes)
 * and three deletes (of keys put 30, 31 and 40 batches before: made, as
 * nearly all the cycle's are). The timed parts (each a noinline function, so
 * `valgrind --tool=callgrind --toggle-collect='step_*' overlay-bench` counts
 * their instructions alone): step_add, the batch's record decoded once
 * (derived_decode, as the redo decodes a held batch's) and overlay_add of its
 * ops; step_lookups,
 * as many CQ and slot lookups as it has messages — one in two hundred of a
 * held place, the rest of places made a while ago; step_drop, overlay_drop of
 * the oldest batch once HELD are held. Prints ns per written place (all
 * parts), per place added and dropped, and per lookup. Exits 0
 * unless a lookup returns a wrong value (then it says which).
 * Usage: overlay-bench [--quick] (--quick: 68 batches, not 680).
 */
#include "levels/clog_derived.h"
#include "levels/clog_overlay.h"
#include "levels/clog_redo.h"
#include "levels/keys.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MESSAGES 294 /* a batch's messages: 200 000 / 680 */
#define HELD     23  /* batches held at once */
#define QUEUES   4

typedef struct held_batch {
    uint64_t end;
    redo_batch_t b;
    derived_op_t *ops; /* b's record decoded by step_add, as the redo decodes a held batch's once */
    size_t nops;
} held_batch_t;

static void die(const char *what)
{
    fprintf(stderr, "overlay-bench: %s\n", what);
    exit(1);
}

static void key_of(char *k, char tag, uint64_t m, size_t len)
{
    memset(k, 'k', len);
    k[0] = tag;
    for (size_t i = 0; i < 8; i++) {
        k[len - 1 - i] = (char)('0' + (m >> (4 * i) & 15));
    }
}

static void build_batch(redo_batch_t *b, uint64_t batch)
{
    redo_batch_free(b);
    *b = (redo_batch_t){ 0 };
    char k[32];
    for (uint64_t i = 0; i < MESSAGES; i++) {
        uint64_t m = batch * MESSAGES + i;
        redo_cq_write(b, (uint32_t)(m % QUEUES), m / QUEUES, &(cq_entry_t){ m + 1, m * 7 });
        redo_slot_write(b, 0, 2 * m, &(slot_t){ m + 1, (uint32_t)(m % QUEUES), 0, m / QUEUES });
        redo_slot_write(b, 0, 2 * m + 1, &(slot_t){ m + 1, 9, 0, m });
        key_of(k, 'Y', m, 24);
        redo_db_put(b, k, 24, "lease-value", 11);
        key_of(k, 'K', m, 32);
        redo_db_put(b, k, 32, "count", 5);
        key_of(k, 'O', m, 20);
        redo_db_put(b, k, 20, "copy-of-the-message-id", 22);
        key_of(k, 'Y', m - 30 * MESSAGES, 24);
        redo_db_delete(b, k, 24);
        key_of(k, 'K', m - 31 * MESSAGES, 32);
        redo_db_delete(b, k, 32);
        key_of(k, 'O', m - 40 * MESSAGES, 20);
        redo_db_delete(b, k, 20);
    }
    memcpy(b->derived, "HGRD", 4);
    be32_put(b->derived + 4, b->ops);
}

static uint64_t lookups, held_found;

/* The timed parts of one batch (see the head): the add, the lookups, the drop. */
static __attribute__((noinline)) void step_add(clog_overlay_t *o, held_batch_t *h)
{
    int whole;
    h->nops = derived_decode(h->b.derived, h->b.len, &h->ops, &whole);
    overlay_add(o, h->end, h->ops, h->nops);
}

static __attribute__((noinline)) void step_lookups(const clog_overlay_t *o, uint64_t batch)
{
    for (uint64_t i = 0; i < MESSAGES; i++) {
        uint64_t m = batch * MESSAGES + i;
        /* one in 200 of this batch's places, the rest of messages made HELD + 2 batches ago (never written, early
         * on) */
        uint64_t r = i % 200 == 0 ? m : (m > (HELD + 2) * MESSAGES ? m - (HELD + 2) * MESSAGES : m + 100000000);
        int in_held = r == m;
        cq_entry_t e;
        slot_t s;
        int q = overlay_cq(o, (uint32_t)(r % QUEUES), r / QUEUES, &e);
        int t = overlay_slot(o, 0, 2 * r, &s);
        if (in_held != (q == OVERLAY_HELD) || in_held != (t == OVERLAY_HELD) ||
            (in_held && (e.log_offset != m + 1 || s.id != m + 1))) {
            die("a lookup gave a wrong answer");
        }
        held_found += (uint64_t)in_held * 2;
        lookups += 2;
    }
}

static __attribute__((noinline)) void step_drop(clog_overlay_t *o, held_batch_t *old)
{
    overlay_drop(o, old->end);
    free(old->ops);
    old->ops = NULL;
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    uint64_t batches = argc > 1 && strcmp(argv[1], "--quick") == 0 ? 68 : 680;
    if (argc > 2 || (argc == 2 && batches == 680)) {
        die("usage: overlay-bench [--quick]");
    }
    clog_overlay_t *o = overlay_new();
    held_batch_t ring[HELD + 1] = { 0 };
    uint64_t places = 0;
    double ns_add = 0, ns_look = 0, ns_drop = 0;
    for (uint64_t batch = 0; batch < batches; batch++) {
        held_batch_t *h = &ring[batch % (HELD + 1)];
        build_batch(&h->b, batch);
        h->end = (batch + 1) * 4096;
        places += h->b.ops;
        double t0 = now_ns();
        step_add(o, h);
        double t1 = now_ns();
        step_lookups(o, batch);
        double t2 = now_ns();
        if (batch >= HELD - 1) {
            step_drop(o, &ring[(batch + 1) % (HELD + 1)]);
        }
        double t3 = now_ns();
        ns_add += t1 - t0;
        ns_look += t2 - t1;
        ns_drop += t3 - t2;
    }
    printf("overlay-bench: %" PRIu64 " batches, %" PRIu64 " places written, %" PRIu64 " lookups (%" PRIu64
           " held), %zu places held at the end\n",
           batches, places, lookups, held_found, overlay_count(o));
    printf("overlay-bench: %.1f ns a written place (its add, its drop and the lookups shared out), %.2f ms in all\n",
           (ns_add + ns_look + ns_drop) / (double)places, (ns_add + ns_look + ns_drop) / 1e6);
    printf("overlay-bench: add %.1f ns a place, drop %.1f ns a place, lookup %.1f ns\n", ns_add / (double)places,
           ns_drop / (double)places, ns_look / (double)lookups);
    for (size_t i = 0; i < HELD + 1; i++) {
        free(ring[i].ops);
        redo_batch_free(&ring[i].b);
    }
    overlay_free(o);
    return 0;
}
