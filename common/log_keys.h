/*
 * common/log_keys.h — the logging keys of the three daemons: one set of
 * config-table rows (common/cfg.h), one set of fields, one apply.
 *
 * A program puts LOG_KEYS_FIELDS in its config struct and
 * LOG_KEYS_ROWS(its_config_t) in its cfg_key_t table; the keys are
 *   log-level   debug|info|warn|error  (default info)
 *   log-file    a path records are appended to (unset: stderr)
 *   log-format  text|json              (default text)
 * All three are reloaded on SIGHUP (cfg_reload also reopens the log file
 * first, for logrotate). log_keys_apply puts them in force: at start-up (a
 * file that cannot be opened is a configuration error) and, through the
 * table's rows (log_keys_apply_table), on SIGHUP (common/reload.c).
 *
 * Header only. Main thread, or the SIGHUP thread.
 */
#ifndef HG_COMMON_LOG_KEYS_H
#define HG_COMMON_LOG_KEYS_H

#include <stddef.h>

#include "base/err.h"
#include "common/cfg.h"
#include "common/log.h"

/* The fields, inside the program's config struct. */
#define LOG_KEYS_FIELDS                \
    int log_level;  /* log_level_t */  \
    char *log_file; /* NULL: stderr */ \
    int log_format  /* log_format_t */

/* The rows, for a table of the program's config_type (with LOG_KEYS_FIELDS). */
#define LOG_KEYS_ROWS(config_type)                                                                                     \
    { CFG_KEY("log-level", CFG_ENUM, "info", 0, 3, offsetof(config_type, log_level),                                   \
              "least severe log records written"),                                                                     \
      .words = LOG_LEVEL_WORDS, .reload = 1 },                                                                         \
        { CFG_KEY("log-file", CFG_STRING, NULL, 0, 0, offsetof(config_type, log_file),                                 \
                  "append log records to this file (unset: stderr); reopened by path at every reload, for logrotate"), \
          .hint = "PATH", .reload = 1 },                                                                               \
    {                                                                                                                  \
        CFG_KEY("log-format", CFG_ENUM, "text", 0, 1, offsetof(config_type, log_format),                               \
                "log record format: text, or json (one object a line)"),                                               \
            .words = LOG_FORMAT_WORDS, .reload = 1                                                                     \
    }

/* Put the three keys of conf (a config struct with LOG_KEYS_FIELDS) in
 * force: the file first, so a file that cannot be opened changes nothing.
 * Returns 0, or -1 with "log-file: cannot open '<path>': <why>" in err. */
#define log_keys_apply(conf, err, errlen) \
    log_keys_apply_values((conf)->log_level, (conf)->log_file, (conf)->log_format, (err), (errlen))

static inline int log_keys_apply_values(int level, const char *file, int format, char *err, size_t errlen)
{
    if (log_open_file(file, err, errlen) != 0)
        return -1;
    log_set_level((log_level_t)level);
    log_set_format((log_format_t)format);
    return 0;
}

/* log_keys_apply for a conf known only through its table t (with
 * LOG_KEYS_ROWS): the fields at the offsets of the rows named log-level,
 * log-file and log-format. Returns 0, or -1 with err: log_keys_apply's, or
 * "no log-level, log-file and log-format rows in the config table". */
static inline int log_keys_apply_table(const cfg_table_t *t, const void *conf, char *err, size_t errlen)
{
    const cfg_key_t *level = cfg_find(t, "log-level");
    const cfg_key_t *file = cfg_find(t, "log-file");
    const cfg_key_t *format = cfg_find(t, "log-format");
    if (level == NULL || file == NULL || format == NULL)
        return err_set(err, errlen, "no log-level, log-file and log-format rows in the config table");
    const char *c = conf;
    return log_keys_apply_values(*(const int *)(c + level->offset), *(char *const *)(c + file->offset),
                                 *(const int *)(c + format->offset), err, errlen);
}

#endif
