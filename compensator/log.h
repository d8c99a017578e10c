/*
 * compensator/log.h — log lines on stderr: UTC time, level, message.
 *
 * One line per call, written with one fprintf, so lines from different
 * threads never interleave. The threshold is set once at start-up, before
 * any thread runs (comp_log_set_level), and only read afterwards.
 */
#ifndef HG_COMPENSATOR_LOG_H
#define HG_COMPENSATOR_LOG_H

typedef enum comp_log_level { COMP_LOG_ERROR, COMP_LOG_WARN, COMP_LOG_INFO, COMP_LOG_DEBUG } comp_log_level_t;

/* Parse "error" / "warn" / "info" / "debug". Returns 0 with *out, -1 when the
 * name is none of those. */
int comp_log_parse_level(const char *name, comp_log_level_t *out);

/* Lines above level are dropped. Call before starting threads. */
void comp_log_set_level(comp_log_level_t level);

/* 1 when a line of this level would be written. */
int comp_log_enabled(comp_log_level_t level);

/* Write one line. Thread-safe. */
void comp_log(comp_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
