/*
 * levels/table.h — the delay-level table.
 *
 * A level table is a strictly increasing list of delays (durations in the
 * grammar of base/units.h), numbered 1..count
 * (level 0 means "no delay"). The default is RocketMQ's 18 levels:
 *   1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h
 *
 * Every delay is in milliseconds (uint64_t). Pure logic: no I/O, no allocation,
 * thread-safe (tables are plain values).
 *
 * Error convention (CONTRIBUTING.md): functions return 0 on success, -1 on failure and,
 * on failure, write a message naming the problem into err[errlen] (err may be
 * NULL). The message never ends with a newline.
 */
#ifndef HG_LEVELS_TABLE_H
#define HG_LEVELS_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/units.h"

#define LVL_MAX_LEVELS      64                    /* most levels a table may have */
#define LVL_MAX_HOPS        255                   /* most hops a chain plan may take */
#define LVL_MAX_DURATION_MS UNITS_MAX_DURATION_MS /* the longest level: the grammar's cap */
#define LVL_DEFAULT_SPEC    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

typedef struct lvl_table {
    int count;                             /* levels 1..count are valid */
    uint64_t delay_ms[LVL_MAX_LEVELS + 1]; /* [0] is always 0 */
} lvl_table_t;

typedef enum lvl_round {
    LVL_ROUND_UP,     /* smallest level >= timeout (never early) */
    LVL_ROUND_NEAREST /* level closest to timeout; ties go to the larger */
} lvl_round_t;

/* Fill t with RocketMQ's 18 default levels. */
void lvl_table_default(lvl_table_t *t);

/* Parse a table spec: durations separated by blanks and/or commas, e.g.
 * "1s 5s 10s" or "1s,5s,10s". Fails on an empty spec, a bad duration (naming
 * it and its position), a zero delay, a level not strictly greater than the
 * one before (unsorted or duplicate, naming both), or more than LVL_MAX_LEVELS
 * levels. On failure *t is left unspecified. */
int lvl_table_parse(const char *spec, lvl_table_t *t, char *err, size_t errlen);

/* Write the table as a canonical spec ("1s 5s ... 2h") that lvl_table_parse
 * reads back to an equal table. Returns the length (snprintf semantics). */
int lvl_table_format(const lvl_table_t *t, char *buf, size_t buflen);

/* 0 when the tables are equal. Otherwise 1, and msg[msglen] names the first
 * difference, e.g. "level 3 is 10s in the data directory but 15s in the
 * configuration" or "the data directory has 18 levels but the configuration
 * has 17". a is described as `a_name`, b as `b_name`. */
int lvl_table_diff(const lvl_table_t *a, const char *a_name, const lvl_table_t *b, const char *b_name, char *msg,
                   size_t msglen);

/* The one level for a timeout, RocketMQ style. LVL_ROUND_UP: the smallest level
 * whose delay >= timeout_ms (timeouts above the last level get the last level,
 * timeout 0 gets level 1). LVL_ROUND_NEAREST: the level with the smallest
 * |delay - timeout|, ties to the larger. Returns a level in 1..count. */
int lvl_level_for(const lvl_table_t *t, uint64_t timeout_ms, lvl_round_t mode);

/* The next hop of a chain: the largest level whose delay <= remaining_ms; when
 * remaining_ms is below the smallest level, the smallest level (where the
 * message then waits only remaining_ms: lvl_hop_ms). 0 when remaining_ms == 0. */
int lvl_next_hop(const lvl_table_t *t, uint64_t remaining_ms);

/* How long a chained message with remaining_ms to go waits on `level` (the one
 * lvl_next_hop chose): the level's delay, or remaining_ms when that is shorter
 * — the remainder a table has no level for, e.g. the 500 ms of 1500ms. A level
 * queue is ordered by due time (levels/keys.h), so such a short hop still comes
 * out of its level's head at its exact due millisecond. LEVEL n never takes this
 * path: it always waits exactly level n's delay (RocketMQ's meaning). */
uint64_t lvl_hop_ms(const lvl_table_t *t, int level, uint64_t remaining_ms);

/* The whole chain plan for delay_ms, exact to the millisecond (greedy:
 * lvl_next_hop repeatedly; the last hop waits only the remainder, lvl_hop_ms).
 * Writes up to max_levels levels into levels[] and the hop count into *hops (0
 * for a zero delay). Fails when delay_ms > max_delay_ms ("delay 4d exceeds
 * max-delay 3d"), or when the plan would need more than max_levels or
 * LVL_MAX_HOPS hops. */
int lvl_chain_plan(const lvl_table_t *t, uint64_t delay_ms, uint64_t max_delay_ms, uint8_t *levels, int max_levels,
                   int *hops, char *err, size_t errlen);

/* Sum of the level delays of a plan (for checks): the sum of
 * t->delay_ms[levels[i]], UINT64_MAX when a level is outside the table. A plan
 * whose last hop waits a remainder (lvl_hop_ms) waits less than this. */
uint64_t lvl_plan_total(const lvl_table_t *t, const uint8_t *levels, int hops);

#endif
