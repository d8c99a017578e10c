/*
 * common/log.h — one-line log records on stderr, shared by the daemons.
 *
 * Every record is one line, written with one write(2) so lines from
 * different threads never interleave:
 *     2026-11-29T18:00:00.123Z [info] listening on 127.0.0.1:7379
 * Time is UTC with milliseconds. Records below the configured level are
 * dropped. Thread-safe; never fails (a failed write is ignored).
 */
#ifndef HG_COMMON_LOG_H
#define HG_COMMON_LOG_H

typedef enum log_level {
    LOG_LEVEL_DEBUG = 0,
    LOG_LEVEL_INFO = 1,
    LOG_LEVEL_WARN = 2,
    LOG_LEVEL_ERROR = 3
} log_level_t;

/* The level words in order, for a config table's enum key ("debug|info|warn|error"). */
#define LOG_LEVEL_WORDS "debug|info|warn|error"

/* Records below level are dropped (default LOG_LEVEL_INFO). Any thread. */
void log_set_level(log_level_t level);

/* The level set last (LOG_LEVEL_INFO until then). Any thread. */
log_level_t log_get_level(void);

/* "debug", "info", "warn", "error"; "?" for anything else. */
const char *log_level_name(log_level_t level);

/* Write one record; the message must not end with a newline (one is added;
 * CR/LF inside become spaces so a record is always one line). Messages
 * longer than the line buffer are cut and end with "...". */
void log_msg(log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
