/*
 * common/log_limit.h — a failure that repeats, logged without flooding the
 * log: the first time at once, then at most once per interval with a count,
 * and a line when the thing that failed works again.
 *
 * A daemon whose dependency is down (MariaDB stopped or its disk full, the
 * broker killed or refusing a password) fails every message or every
 * attempt the same way, hundreds of times a second. Logging each one hides
 * the line that matters. A log_limit_t stands for one dependency (MariaDB,
 * the broker); the code that fails calls log_limit_fail with the failure's
 * key (what makes two failures "the same": the error's text without the
 * order id or attempt number) and the line to log, and the code that
 * succeeds calls log_limit_ok. What the log then shows:
 *
 *     [warn] worker 0: cancels fail: The table 'orders' is full (order 1203, attempt 1)
 *     [warn] worker 1: cancels fail: The table 'orders' is full (order 1411, attempt 2) (repeated 412 times in the last 10.0 s)
 *     [warn] MariaDB answers again after 12.3 s; 1034 attempts failed meanwhile
 *
 * - a key not seen since the outage began (or whose last line is older than
 *   the interval) is logged at once; the same key again within the interval
 *   is only counted, and the next line of that key says how many were not
 *   logged (" (repeated N times in the last X s)");
 * - up to LOG_LIMIT_KEYS keys are tracked at once (two workers alternating
 *   between two errors do not flood either); a further key takes the slot
 *   used least recently;
 * - log_limit_ok after failures writes one line: "<recovered> again after
 *   X s; N attempts failed meanwhile" (recovered: "MariaDB answers"), at the
 *   highest level of those failures but no higher than warn (whoever saw
 *   the failure at that log-level sees its end), and forgets the keys. Without a failure before, it writes nothing and
 *   costs one atomic load.
 *
 * An event that is no failure of a dependency but comes in floods all the
 * same (a client refused at max-clients, a request for a foreign Host) goes
 * through log_limit_count on a limiter of its own: the same once-per-interval
 * lines with the count, and no outage, so no recovery line.
 *
 * Setting one up, one way each (CONTRIBUTING.md): a limiter with static
 * storage (a daemon's, living as long as the process) is defined with
 * LOG_LIMIT_INITIALIZER and needs nothing at run time; one inside an
 * allocated struct gets log_limit_init and log_limit_destroy with its owner.
 * Never a lazy init (pthread_once) in the logging call.
 *
 * Thread-safe (one mutex per limiter, taken by a failure or a count, and by a
 * success only during an outage). The clock is clock_mono_ms and the lines go
 * to log_msg, unless a test injects both (log_limit_set_hooks).
 */
#ifndef HG_COMMON_LOG_LIMIT_H
#define HG_COMMON_LOG_LIMIT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/log.h"

#define LOG_LIMIT_KEYS        8     /* distinct failures tracked at once */
#define LOG_LIMIT_KEY_MAX     160   /* bytes of a key compared (longer keys are cut) */
#define LOG_LIMIT_INTERVAL_MS 10000 /* the daemons' interval: a repeated failure at most once per 10 s */

/* What a test injects: the clock (milliseconds, never going back) and where
 * the lines go (one line, no newline). */
typedef uint64_t (*log_limit_clock_fn)(void *arg);
typedef void (*log_limit_emit_fn)(log_level_t level, const char *line, void *arg);

typedef struct log_limit_key {
    char key[LOG_LIMIT_KEY_MAX];
    uint64_t logged_ms;  /* when its last line was written */
    uint64_t used_ms;    /* when it last failed (least recently used goes first) */
    uint64_t suppressed; /* failures of this key since its last line, not logged */
} log_limit_key_t;

typedef struct log_limit {
    pthread_mutex_t lock;
    const char *recovered;    /* the recovery line's subject and verb ("MariaDB answers"); not copied */
    uint64_t interval_ms;     /* at most one line per key per interval; 0: LOG_LIMIT_INTERVAL_MS */
    log_limit_clock_fn clock; /* NULL: clock_mono_ms */
    log_limit_emit_fn emit;   /* NULL: log_msg */
    void *hook_arg;
    _Atomic int failing; /* a failure since the last success: log_limit_ok's fast path */
    uint64_t since_ms;   /* the outage's first failure. Under lock, as everything below */
    uint64_t failures;   /* failures since */
    log_level_t worst;   /* their highest level */
    log_limit_key_t keys[LOG_LIMIT_KEYS];
    size_t nkeys;
} log_limit_t;

/* A limiter with static storage, ready without a call:
 *     static log_limit_t db_log = LOG_LIMIT_INITIALIZER("MariaDB answers", LOG_LIMIT_INTERVAL_MS);
 * recovered and interval_ms as log_limit_init's. Never destroyed. */
#define LOG_LIMIT_INITIALIZER(recovered_, interval_ms_)                                             \
    {                                                                                               \
        .lock = PTHREAD_MUTEX_INITIALIZER, .recovered = (recovered_), .interval_ms = (interval_ms_) \
    }

/* Set l up for one dependency; recovered (a string that outlives l) begins
 * the recovery line: "MariaDB answers" gives "MariaDB answers again after …";
 * with at most one line per key per interval_ms (0 means
 * LOG_LIMIT_INTERVAL_MS). */
void log_limit_init(log_limit_t *l, const char *recovered, uint64_t interval_ms);

/* Free what log_limit_init took (the mutex). */
void log_limit_destroy(log_limit_t *l);

/* Replace the clock and the writer (tests); NULL keeps the default
 * (clock_mono_ms, log_msg). Before any other thread uses l. */
void log_limit_set_hooks(log_limit_t *l, log_limit_clock_fn clock, log_limit_emit_fn emit, void *arg);

/* One failure of key (NULL or "": the line's own text is the key). Logs the
 * line (printf format) at level when it is the first of key since the
 * interval began, with the count of the ones not logged appended; else only
 * counts it. Returns 1 when a line was written, 0 when counted. */
int log_limit_fail(log_limit_t *l, log_level_t level, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* One occurrence of an event that is no failure (a refused client): logged
 * as log_limit_fail logs (the line at once when it is the first of key since
 * the interval began, with " (repeated N times in the last X s)" for the ones
 * not logged; else only counted), but it starts no outage, so log_limit_ok
 * never reports it. Give counts a limiter of their own (log_limit_ok forgets
 * the keys of failures). Returns 1 when a line was written, 0 when counted. */
int log_limit_count(log_limit_t *l, log_level_t level, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The dependency worked. After failures: logs the recovery line (at their
 * highest level, warn at most) and returns 1; else 0 and nothing else. */
int log_limit_ok(log_limit_t *l);

#endif
