/*
 * common/log.h — one-line log records on stderr or a log file, shared by
 * the daemons.
 *
 * Every record is one line, written with one write(2) so lines from
 * different threads never interleave. Two formats:
 *     2026-11-29T18:00:00.123Z [info] listening on 127.0.0.1:7379
 *     {"time":"2026-11-29T18:00:00.123Z","level":"info","msg":"listening on 127.0.0.1:7379"}
 * Time is UTC with milliseconds. Records below the configured level are
 * dropped. In text, CR/LF inside a message become spaces; in JSON the
 * message is a JSON string (quote, backslash and control bytes escaped;
 * other bytes as given). Thread-safe; writing never fails (a failed write
 * is ignored). The config-table rows of the three keys (log-level,
 * log-file, log-format) are common/log_keys.h.
 */
#ifndef HG_COMMON_LOG_H
#define HG_COMMON_LOG_H

#include <stddef.h>

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

typedef enum log_format {
    LOG_FORMAT_TEXT = 0,
    LOG_FORMAT_JSON = 1
} log_format_t;

/* The format words in order, for a config table's enum key. */
#define LOG_FORMAT_WORDS "text|json"

/* Records are written in format from now on (default LOG_FORMAT_TEXT). Any thread. */
void log_set_format(log_format_t format);
log_format_t log_get_format(void);

/* Write records to path (appended, created 0640) from now on; NULL or ""
 * means stderr again. The same path as the open file changes nothing.
 * Returns 0, or -1 with "log-file: cannot open '<path>': <why>" in err and
 * the destination unchanged. Main thread or the SIGHUP thread. */
int log_open_file(const char *path, char *err, size_t errlen);

/* Reopen the log file by its path (after logrotate moved it away); nothing
 * when logging to stderr. Returns 0, or -1 with err and records still going
 * to the old file. The SIGHUP thread. */
int log_reopen(char *err, size_t errlen);

/* Write one record; the message must not end with a newline (one is added).
 * Messages longer than 2 KiB are cut and end with "...". */
void log_msg(log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
