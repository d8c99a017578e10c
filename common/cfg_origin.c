/*
 * common/cfg_origin.c — where each key of a config struct was set (contract:
 * cfg.h, cfg_origin_text and cfg_origin_prefix): the file's line, a flag or
 * the default, noted by the file reader and the flag parser
 * (cfg_note_origin) when the table tracks origins, and said in a cross-key
 * check's error ("FILE:LINE: … (other-key: line N)", or the flags named).
 * Runs where the parse runs (the main thread, or cfg_reload's load).
 */
#include "common/cfg.h"
#include "common/cfg_internal.h"

#include <stdio.h>

/* The origins of conf, or NULL when the table tracks none. */
cfg_origin_t *cfg_origins(const cfg_table_t *t, const void *conf)
{
    return t->track_origin ? (cfg_origin_t *)((char *)conf + t->origin_offset) : NULL;
}

/* Key k was set from line (> 0: of the file; -1: a flag; 0: its default). */
void cfg_note_origin(const cfg_table_t *t, void *conf, const cfg_key_t *k, int line)
{
    cfg_origin_t *o = cfg_origins(t, conf);
    size_t i = (size_t)(k - t->keys);
    if (o != NULL && i < CFG_ORIGIN_KEYS)
        o->line[i] = line;
}

const char *cfg_origin_text(const cfg_table_t *t, const void *conf, const char *name, char *buf, size_t len)
{
    const cfg_key_t *k = cfg_find(t, name);
    const cfg_origin_t *o = cfg_origins(t, conf);
    size_t i = k != NULL ? (size_t)(k - t->keys) : 0;
    if (len > 0)
        buf[0] = '\0';
    if (k == NULL || o == NULL || i >= CFG_ORIGIN_KEYS)
        return buf;
    if (o->line[i] > 0)
        snprintf(buf, len, "%s:%d", o->file, o->line[i]);
    else if (o->line[i] < 0)
        snprintf(buf, len, "--%s", k->name);
    else
        snprintf(buf, len, "default");
    return buf;
}

/* How late key name was set, for cfg_origin_prefix: a flag after any line. */
static long origin_rank(const cfg_table_t *t, const void *conf, const char *name)
{
    const cfg_key_t *k = cfg_find(t, name);
    const cfg_origin_t *o = cfg_origins(t, conf);
    if (k == NULL || o == NULL || (size_t)(k - t->keys) >= CFG_ORIGIN_KEYS)
        return 0;
    int line = o->line[k - t->keys];
    return line < 0 ? 1L << 30 : line;
}

void cfg_origin_prefix(const cfg_table_t *t, const void *conf, const char *key_a, const char *key_b, char *err,
                       size_t errlen)
{
    long ra = origin_rank(t, conf, key_a), rb = key_b != NULL ? origin_rank(t, conf, key_b) : 0;
    if (errlen == 0 || (ra == 0 && rb == 0))
        return;
    const char *last = ra >= rb ? key_a : key_b, *other = ra >= rb ? key_b : key_a;
    char where_last[600], where_other[600], text[1024];
    cfg_origin_text(t, conf, last, where_last, sizeof where_last);
    snprintf(text, sizeof text, "%s", err);
    int flag = (ra >= rb ? ra : rb) == 1L << 30;
    if (other == NULL) {
        if (!flag) /* a flag's error names the key already */
            snprintf(err, errlen, "%s: %s", where_last, text);
        return;
    }
    cfg_origin_text(t, conf, other, where_other, sizeof where_other);
    long r_other = ra >= rb ? rb : ra;
    if (!flag && r_other > 0) /* the same file: its line is enough */
        snprintf(where_other, sizeof where_other, "line %ld", r_other);
    if (flag)
        snprintf(err, errlen, "%s (%s: %s; %s: %s)", text, last, where_last, other, where_other);
    else
        snprintf(err, errlen, "%s: %s (%s: %s)", where_last, text, other, where_other);
}
