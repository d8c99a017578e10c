/*
 * levels/store_lane.c — the remainder lane under the store
 * (docs/design-commitlog.md §4, "Step 4a: the wiring plan" 4a.3): a SEND
 * journey's hop that waits a remainder (the 500 ms of DELAY 2500ms) writes
 * its CQ entry on the lane CQ (queue STORE_LANE_QUEUE), not on its level's,
 * so every level CQ stays in due order; the lane's order is levels/lane.c's
 * heap of (due, id), loaded at open from the lane CQ's window, whose head
 * follows the heap's (lane_head). The lane's head and tail are the `M` "lane"
 * record (16 bytes: head, tail), written with the batch that moves them.
 *
 * The due move serves the lane's due tops from the heap (4a.4: level_move.c's
 * serve_level_cq, judging each top by its record and where-slot, through
 * store_lane_next_live and store_lane_pop) while level 1 is served from its
 * CQ; while level 1 is walked by `L` (on_l), a remainder leaves by its `L`
 * entry as in 4a.3, and the heap only says how far the lane CQ's head may go:
 * when a remainder's `L` entry is taken or revoked, its id is noted as gone
 * and the dead tops are dropped (lane_next_live). An entry pushed since the
 * open is live until noted (its slot write may still be pending); one
 * loaded at open and not noted — a message that left before the restart — is
 * judged by its where-slot (journey.c, 4a.5): live while the slot names this
 * lane entry back, not revoked (one check per top, remembered while it stays
 * on top).
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "base/err.h"

#include <inttypes.h>
#include <string.h>

/* The `M` "lane" record's value into head and tail (0 and 0 when v is NULL).
 * 0, or -1 when it is not 16 bytes. */
int store_lane_record_decode(const char *v, size_t vlen, uint64_t *head, uint64_t *tail)
{
    *head = *tail = 0;
    if (v == NULL) {
        return 0;
    }
    if (vlen != 16) {
        return -1;
    }
    *head = be64_get(v);
    *tail = be64_get(v + 8);
    return *head <= *tail ? 0 : -1;
}

int store_lane_open(store_t *s, char *err, size_t errlen)
{
    key_buf_t k;
    key_meta(&k, STORE_META_LANE);
    char *v = NULL;
    size_t vlen = 0;
    int found = store_get(s, &k, &v, &vlen, err, errlen);
    if (found < 0) {
        return -1;
    }
    uint64_t head, tail;
    int bad = store_lane_record_decode(found ? v : NULL, vlen, &head, &tail);
    leveldb_free(v);
    if (bad) {
        return err_set(err, errlen, "corrupt remainder lane record in %s (%zu bytes)", s->path, vlen);
    }
    s->lane_head_written = head;
    s->lane_loaded_tail = tail;
    if (head == tail) {
        s->lane = lane_new(tail, (size_t)STORE_LANE_MAX_ENTRIES);
        return 0;
    }
    cq_t *q = NULL;
    char why[512];
    if (cq_open(s->path, STORE_LANE_QUEUE, head, tail, &q, why, sizeof why) != 0 ||
        lane_load(q, (size_t)STORE_LANE_MAX_ENTRIES, &s->lane, why, sizeof why) != 0) {
        (void)cq_close(q, NULL, 0);
        return err_set(err, errlen, "loading the remainder lane of %s: %s", s->path, why);
    }
    return cq_close(q, err, errlen);
}

void store_lane_free(store_t *s)
{
    lane_free(s->lane);
    s->lane = NULL;
    map_free(&s->lane_left, NULL);
}

void store_lane_abandon(store_t *s)
{
    if (s->lane == NULL || lane_head(s->lane) == lane_tail(s->lane)) {
        return;
    }
    uint64_t tail = lane_tail(s->lane);
    lane_free(s->lane);
    s->lane = lane_new(tail, (size_t)STORE_LANE_MAX_ENTRIES);
    map_free(&s->lane_left, NULL);
    s->lane_live_known = 0;
    store_log_cq_head(s, STORE_LANE_QUEUE, tail);
    s->lane_head_written = tail;
    s->lane_dirty = 1;
}

int store_lane_room(const store_t *s, uint64_t more, char *err, size_t errlen)
{
    if (s->lane == NULL) {
        return 0;
    }
    uint64_t limit = s->opt.lane_max_entries != 0 ? s->opt.lane_max_entries : STORE_LANE_MAX_ENTRIES;
    uint64_t held = lane_size(s->lane);
    if (held + more <= limit) {
        return 0;
    }
    return err_set(err, errlen,
                   "the remainder lane holds %" PRIu64 " entries, its limit %" PRIu64
                   " (remainders leave it at their due, within the smallest level's delay)",
                   held, limit);
}

void store_lane_push(store_t *s, const msg_t *m, uint64_t due, idx_journey_t *j)
{
    j->queue = STORE_LANE_QUEUE;
    j->cq_index = lane_tail(s->lane);
    char why[256];
    if (lane_push(s->lane, due, m->id, j->cq_index, why, sizeof why) != 0) {
        store_break(s, why); /* the batch holding this hop is never written */
        return;
    }
    store_log_cq_append(s, STORE_LANE_QUEUE, j->cq_index, m->id, due);
    store_log_slot(s, m->id, j, 0);
    s->lane_dirty = 1;
    s->pending++; /* the entry and the slot are writes: a commit must follow, also without any LevelDB one */
}

/* lane_next_live's check (above). */
static int lane_top_live(void *ctx, const lane_entry_t *e, char *err, size_t errlen)
{
    store_t *s = ctx;
    if (map_del(&s->lane_left, &e->id, sizeof e->id) != NULL) {
        return LANE_DEAD;
    }
    if (e->cq_index >= s->lane_loaded_tail || (s->lane_live_known && s->lane_live_index == e->cq_index)) {
        return LANE_LIVE; /* pushed since the open: it leaves only by a note above (its X may be pending) */
    }
    int live = store_journey_at(s, e->id, STORE_LANE_QUEUE, e->cq_index, err, errlen); /* by its slot */
    if (live < 0) {
        return -1;
    }
    s->lane_live_known = live;
    s->lane_live_index = e->cq_index;
    return live ? LANE_LIVE : LANE_DEAD;
}

/* The lane CQ's head written where the heap's lowest index now is. */
static void lane_head_follow(store_t *s)
{
    uint64_t head = lane_head(s->lane);
    if (head != s->lane_head_written) {
        store_log_cq_head(s, STORE_LANE_QUEUE, head);
        s->lane_head_written = head;
        s->lane_dirty = 1;
    }
}

int store_lane_left(store_t *s, uint64_t id, char *err, size_t errlen)
{
    map_put(&s->lane_left, &id, sizeof id, (void *)1);
    lane_entry_t top;
    if (lane_next_live(s->lane, lane_top_live, s, &top, err, errlen) < 0) {
        return -1;
    }
    lane_head_follow(s);
    return 0;
}

int store_lane_next_live(store_t *s, lane_check_fn check, void *ctx, lane_entry_t *top, char *err, size_t errlen)
{
    int rc = lane_next_live(s->lane, check, ctx, top, err, errlen);
    lane_head_follow(s);
    return rc;
}

void store_lane_pop(store_t *s)
{
    s->lane_live_known = 0;
    (void)lane_pop(s->lane, NULL);
    lane_head_follow(s);
}

void store_lane_flush(store_t *s)
{
    if (!s->lane_dirty) {
        return;
    }
    key_buf_t k;
    key_meta(&k, STORE_META_LANE);
    char v[16];
    be64_put(v, s->lane_head_written);
    be64_put(v + 8, lane_tail(s->lane));
    store_put(s, &k, v, sizeof v);
    s->lane_dirty = 0;
}
