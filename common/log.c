/*
 * common/log.c — one-line UTC log records on stderr (contract: log.h).
 *
 * The record is formatted into a stack buffer and written with a single
 * write(2) on fd 2, so concurrent records from any threads never mix.
 * Long messages are cut at the buffer size and end with "...".
 * The level is an atomic: set at start-up and on SIGHUP, read everywhere.
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int current_level = LOG_LEVEL_INFO;

static const char *const level_names[] = { "debug", "info", "warn", "error" };

void log_set_level(log_level_t level)
{
    atomic_store(&current_level, (int)level);
}

log_level_t log_get_level(void)
{
    return (log_level_t)atomic_load(&current_level);
}

const char *log_level_name(log_level_t level)
{
    return (level >= LOG_LEVEL_DEBUG && level <= LOG_LEVEL_ERROR) ? level_names[level] : "?";
}

void log_msg(log_level_t level, const char *fmt, ...)
{
    if ((int)level < atomic_load(&current_level)) {
        return;
    }
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ [%s] ", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, log_level_name(level));
    size_t head = (size_t)n;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + head, sizeof line - head - 1, fmt, ap);
    va_end(ap);
    size_t len = head;
    if (m > 0) {
        len += (size_t)m < sizeof line - head - 1 ? (size_t)m : sizeof line - head - 2;
        if ((size_t)m >= sizeof line - head - 1) {
            memcpy(line + len - 3, "...", 3);
        }
    }
    for (size_t i = head; i < len; i++) {
        if (line[i] == '\n' || line[i] == '\r') {
            line[i] = ' ';
        }
    }
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
