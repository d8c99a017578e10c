/*
 * console/history.h — the overview's history: the sampler's samples kept
 * for `history`, consolidated so that the overview's "history" array has
 * at most HISTORY_POINTS_MAX points however many samples `history /
 * sample-interval` is.
 *
 * Each kept point stands for `step` neighbouring samples (step 1 while
 * history / sample-interval + 1 fits in HISTORY_POINTS_MAX: then a point is
 * a sample, and the array is what it always was). A point's rates are the
 * average over its samples' steps that have one (a broker outage or a
 * counter that went down gives none, as for a single step); its lateness
 * p50 / p99 and overdue count are its samples' highest (a spike is not
 * averaged away); its time is its newest sample's. So memory, the reply's
 * size and the time to render it are bounded by HISTORY_POINTS_MAX, and a
 * console up for weeks answers as on its first hour.
 *
 * Not locked: the sampler pushes and renders under its own lock.
 */
#ifndef HG_CONSOLE_HISTORY_H
#define HG_CONSOLE_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "base/json.h"

/* Points in the overview's history at most: about 127 bytes of JSON each. */
#define HISTORY_POINTS_MAX 1000

/* One sample of the sampler. */
typedef struct history_sample {
    uint64_t t_ms;
    int broker_ok;
    uint64_t sends, deliveries, acks, nacks, dlq_moves;
    double lateness_p50_ms, lateness_p99_ms;
    long long pending, overdue; /* -1: unknown */
} history_sample_t;

/* The rates a point carries: sends, deliveries, acks per second. */
enum {
    HISTORY_SENDS,
    HISTORY_DELIVERIES,
    HISTORY_ACKS,
    HISTORY_RATES
};

typedef struct history_point {
    uint64_t t_ms;                                         /* its newest sample's */
    size_t samples;                                        /* how many it stands for, 1..step */
    uint64_t delta[HISTORY_RATES], step_ms[HISTORY_RATES]; /* summed over its steps that give a rate */
    int lateness_known;                                    /* a sample of it had the broker's answer */
    double lateness_p50_ms, lateness_p99_ms;               /* their highest */
    long long overdue;                                     /* the highest known, or -1 */
} history_point_t;

typedef struct history {
    history_point_t *ring;
    size_t cap, count, head; /* head: the point being filled (count > 0) */
    size_t step;             /* samples per point */
    history_sample_t last;   /* the newest sample (count > 0) */
} history_t;

/* Keep samples (history / sample-interval + 1) samples, in at most
 * max_points points (HISTORY_POINTS_MAX; a larger max_points than samples
 * keeps every sample as its own point). Both at least 1. Allocates the
 * ring whole (out of memory aborts). */
void history_init(history_t *h, size_t samples, size_t max_points);

void history_free(history_t *h);

/* Add a sample (times increasing): into the newest point until it holds
 * step samples, then into a new one, the oldest dropped when full. */
void history_push(history_t *h, const history_sample_t *x);

/* The newest sample, or NULL before the first. */
const history_sample_t *history_last(const history_t *h);

/* The overview's "history" array, oldest first: {"t_ms", "sends_per_s",
 * "deliveries_per_s", "acks_per_s", "lateness_p50_ms", "lateness_p99_ms",
 * "overdue"}, null where a point has no value. */
void history_json(const history_t *h, json_t *j);

#endif
