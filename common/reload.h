/*
 * common/reload.h — a daemon's SIGHUP: re-read the configuration the way the
 * program started, put the log keys in force, log what changed.
 *
 * The four daemons (broker, consumer, compensator, console) reload alike: a
 * fresh config struct is filled by the program's own start-up parse over the
 * argv it was started with (its defaults, the same --config file, the flags
 * still winning over the file, its checks); cfg_reload (common/cfg.h) copies
 * the .reload keys that differ into the running struct and logs every
 * difference (or "nothing changed", or the error of a bad file, keeping the
 * running configuration); the log keys (common/log_keys.h) are put in force.
 * What differs is the program's and comes in reload_program_t: the size of
 * its struct, how it fills one (load) and frees one (release). What a
 * program does besides (the broker and the console read their TLS files
 * again, the broker its users file) stays in the program.
 *
 * One thread at a time: the program's SIGHUP thread, or its event loop.
 */
#ifndef HG_COMMON_RELOAD_H
#define HG_COMMON_RELOAD_H

#include <stddef.h>

#include "common/cfg.h"

/* What a program's reload needs of its config struct. */
typedef struct reload_program {
    size_t size; /* of the config struct */
    /* Fill conf (zeroed, size bytes) the way start-up did, from the argv the
     * program was started with. Returns 0, or -1 with err. */
    int (*load)(void *conf, int argc, char **argv, char *err, size_t errlen);
    /* Free what load allocated in conf (also after a failed load); not conf itself. */
    void (*release)(void *conf);
} reload_program_t;

/* Re-read the configuration of running (a config struct described by t,
 * whose table has LOG_KEYS_ROWS) on SIGHUP: cfg_reload with p's load over
 * argc/argv and p's release; when it copied a key, the log keys of running
 * are put in force (log_keys_apply_table: the file first), and a log-file
 * that cannot be opened is logged at error — "SIGHUP: log-file: cannot open
 * '<path>': <why> (logging where it did)" — and leaves the destination, the
 * level and the format as they were. Returns what cfg_reload returns: the
 * number of keys applied, or -1 after a failed load (logged; running
 * unchanged). Nothing to free; p and argv are only read. */
int reload_config(const cfg_table_t *t, void *running, const reload_program_t *p, int argc, char **argv);

#endif
