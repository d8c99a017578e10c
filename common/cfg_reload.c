/*
 * common/cfg_reload.c — the config-table engine's SIGHUP (cfg_reload,
 * contract: cfg.h): the log file reopened, the program's start-up parse run
 * again into a fresh struct, the reloadable keys that differ swapped into
 * the running one, and every difference logged (a key that only a restart
 * changes is named, without its values: it may be a password). Runs on the
 * thread that handles SIGHUP, one reload at a time.
 */
#include "common/cfg.h"
#include "common/cfg_internal.h"

#include "base/alloc.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

/* ---- SIGHUP ------------------------------------------------------------------ */

/* The bytes of key k's field. */
static size_t field_size(const cfg_key_t *k)
{
    switch (k->type) {
    case CFG_STRING:
        return sizeof(char *);
    case CFG_BOOL:
    case CFG_ENUM:
        return sizeof(int);
    case CFG_DOUBLE:
        return sizeof(double);
    case CFG_INT:
    case CFG_SIZE:
    case CFG_DURATION:
        return sizeof(long long);
    case CFG_CUSTOM:
        break;
    }
    return 0;
}

/* Swap key k's field between a and b. */
static void swap_field(const cfg_key_t *k, void *a, void *b)
{
    unsigned char tmp[16];
    _Static_assert(sizeof(long long) <= 16 && sizeof(double) <= 16 && sizeof(char *) <= 16, "tmp");
    size_t n = field_size(k);
    memcpy(tmp, (char *)a + k->offset, n);
    memcpy((char *)a + k->offset, (char *)b + k->offset, n);
    memcpy((char *)b + k->offset, tmp, n);
}

int cfg_reload(const cfg_table_t *t, void *running, const cfg_reload_ops_t *ops)
{
    char err[1024];
    if (log_reopen(err, sizeof err) != 0) /* logrotate moved the file away: a new one by the same path */
        log_error("SIGHUP: %s (still logging to the old file)", err);
    void *fresh = xcalloc(1, ops->size);
    if (ops->load(fresh, ops->arg, err, sizeof err) != 0) {
        log_error("SIGHUP: configuration error, keeping the running configuration: %s", err);
        ops->release(fresh);
        free(fresh);
        return -1;
    }
    /* Pass 1: swap the reloadable keys that differ (fresh then holds the old values). */
    unsigned char *swapped = xcalloc(t->count ? t->count : 1, 1);
    int applied = 0, differ = 0;
    char was[CFG_MAX_VALUE], now[CFG_MAX_VALUE];
    for (size_t i = 0; i < t->count; i++) {
        const cfg_key_t *k = &t->keys[i];
        if (k->type == CFG_CUSTOM)
            continue;
        cfg_value_text(t, running, i, was, sizeof was);
        cfg_value_text(t, fresh, i, now, sizeof now);
        if (strcmp(was, now) == 0)
            continue;
        differ++;
        if (!k->reload) {
            /* No values: this key may be a password. */
            log_warn("SIGHUP: %s changed, but takes effect only at a restart (keeping the running value)", k->name);
            continue;
        }
        swap_field(k, running, fresh);
        swapped[i] = 1;
        applied++;
    }
    log_level_t before = log_get_level();
    if (applied > 0 && ops->apply != NULL)
        ops->apply(running, ops->arg);
    log_level_t after = log_get_level();
    /* Pass 2: say what changed, at the more verbose of the two levels. */
    log_set_level(before < after ? before : after);
    for (size_t i = 0; i < t->count; i++) {
        if (!swapped[i])
            continue;
        cfg_value_text(t, fresh, i, was, sizeof was);
        cfg_value_text(t, running, i, now, sizeof now);
        /* An empty value said as such: "dedup-topics  -> order-timeout" read as a typo */
        log_info("SIGHUP: %s %s -> %s", t->keys[i].name, was[0] ? was : "(unset)", now[0] ? now : "(unset)");
    }
    if (differ == 0)
        log_info("SIGHUP: configuration re-read, nothing changed");
    log_set_level(after);
    free(swapped);
    ops->release(fresh);
    free(fresh);
    return applied;
}
