/*
 * compensator/log.c — hourglass-compensator's log lines (contract: log.h).
 *
 * Format (as hourglass-consumer's): 2024-05-01T12:00:00.123Z info  message.
 * Any thread; the threshold is written once before threads start.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static comp_log_level_t threshold = COMP_LOG_INFO;

int comp_log_parse_level(const char *name, comp_log_level_t *out)
{
    for (int i = 0; i <= COMP_LOG_DEBUG; i++)
        if (name != NULL && strcmp(name, level_names[i]) == 0) {
            *out = (comp_log_level_t)i;
            return 0;
        }
    return -1;
}

void comp_log_set_level(comp_log_level_t level)
{
    threshold = level;
}

int comp_log_enabled(comp_log_level_t level)
{
    return level <= threshold;
}

void comp_log(comp_log_level_t level, const char *fmt, ...)
{
    if (level > threshold)
        return;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s\n", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
            tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, level_names[level], text);
}
