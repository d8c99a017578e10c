/*
 * common/cfg_internal.h — what the config-table engine's files share
 * (cfg.c: the core; cfg_origin.c, cfg_ini.c, cfg_args.c, cfg_print.c,
 * cfg_reload.c); nothing outside them includes it. The public contract is
 * cfg.h.
 */
#ifndef HG_COMMON_CFG_INTERNAL_H
#define HG_COMMON_CFG_INTERNAL_H

#include "common/cfg.h"

#include <stddef.h>

#define CFG_MAX_VALUE 4096 /* longest value, and our INI line buffer (libinih's own limit is smaller) */
#define CFG_MAX_NAME  64   /* longest key name */

/* Parse value (trimmed; at most CFG_MAX_VALUE bytes) into k's field of conf, after k's hook; the origin is
 * not noted (cfg_note_origin). Returns 0, or -1 with err naming the key and the value. */
int cfg_set_key(const cfg_table_t *t, void *conf, const cfg_key_t *k, const char *value_in, cfg_source_t source,
                char *err, size_t errlen);

/* The origins of conf, or NULL when the table tracks none (cfg_origin.c, as the next). */
cfg_origin_t *cfg_origins(const cfg_table_t *t, const void *conf);

/* Key k was set from line (> 0: of the file; -1: a flag; 0: its default); nothing when untracked. */
void cfg_note_origin(const cfg_table_t *t, void *conf, const cfg_key_t *k, int line);

#endif
