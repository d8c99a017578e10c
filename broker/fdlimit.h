/*
 * broker/fdlimit.h — file descriptors: the budget of RLIMIT_NOFILE between
 * client connections and what the broker needs besides them.
 *
 * At start-up (main thread, before any other thread) the broker needs
 *   max-clients                  one descriptor per client connection
 * + max-open-files               LevelDB's table-file cache
 * + FDLIMIT_FIXED_RESERVE        stdio, the listeners, the event base, the
 *                                storage thread's wake-up, LevelDB's own
 *                                files (LOCK, LOG, MANIFEST, CURRENT, the
 *                                write-ahead log, a compaction's outputs),
 *                                the spare descriptor of the accept path and
 *                                a few /metrics connections.
 * When the soft limit is lower, it is raised towards the hard limit (never
 * the hard limit itself: that is the administrator's, e.g. systemd's
 * LimitNOFILE). When that is still short, max-clients is lowered to what
 * fits; when even FDLIMIT_MIN_CLIENTS would not fit, max-open-files is
 * lowered too (to no less than FDLIMIT_MIN_OPEN_FILES). Each change is
 * logged with the numbers.
 *
 * fdlimit_plan is the arithmetic alone (unit-tested); fdlimit_apply reads and
 * raises the process limit and plans with it.
 */
#ifndef HG_BROKER_FDLIMIT_H
#define HG_BROKER_FDLIMIT_H

#include <stddef.h>

#define FDLIMIT_FIXED_RESERVE  48 /* descriptors besides clients and LevelDB's table cache */
#define FDLIMIT_MIN_CLIENTS    16 /* fewer clients than this: max-open-files gives way first */
#define FDLIMIT_MIN_OPEN_FILES 64 /* LevelDB's table cache never goes below this */

typedef struct fdlimit_plan {
    long long want_soft;      /* the soft limit asked for: clients + open files + reserve */
    long long max_clients;    /* effective max-clients */
    long long max_open_files; /* effective max-open-files */
} fdlimit_plan_t;

/* Split a soft limit of `soft` descriptors between max_clients (as
 * configured) and max_open_files (as configured). Fills *out: want_soft is
 * what everything as configured needs; max_clients and max_open_files are
 * the configured values when soft >= want_soft, else lowered as above.
 * Returns 0, or -1 when soft cannot hold even FDLIMIT_MIN_OPEN_FILES + the
 * reserve + one client (err says so, with the numbers). */
int fdlimit_plan(long long soft, long long max_clients, long long max_open_files, fdlimit_plan_t *out, char *err,
                 size_t errlen);

/* Read RLIMIT_NOFILE, raise the soft limit towards want_soft (up to the hard
 * limit) when it is lower, and plan with the result; *max_clients and
 * *max_open_files are updated in place, and every change is logged
 * (log_info for a raise, log_warn for a lowered setting). Main thread, before
 * any other thread starts. 0, or -1 with the cause in err. */
int fdlimit_apply(long long *max_clients, long long *max_open_files, char *err, size_t errlen);

#endif
