/*
 * common/log_limit.c — a repeated failure logged once per interval with a
 * count, and its recovery logged once (contract: log_limit.h).
 *
 * Invariants: failing is 1 exactly while failures > 0 (log_limit_count
 * touches neither); keys[0..nkeys) are
 * the distinct keys seen since the outage began (at most LOG_LIMIT_KEYS, the
 * least recently used replaced); a key's suppressed counts its failures
 * since its own last line. Lines are formatted and written under the lock,
 * so a count is never reported twice nor lost between two threads.
 *
 * Thread: any (the consumer's workers, the compensator's loops, the broker's
 * event loop).
 */
#include "common/log_limit.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"

static uint64_t default_clock(void *arg)
{
    (void)arg;
    return clock_mono_ms();
}

static void default_emit(log_level_t level, const char *line, void *arg)
{
    (void)arg;
    log_msg(level, "%s", line);
}

/* The clock, the writer and the interval, with LOG_LIMIT_INITIALIZER's
 * zeroes meaning the defaults. */
static uint64_t now_ms(const log_limit_t *l)
{
    return l->clock != NULL ? l->clock(l->hook_arg) : default_clock(NULL);
}

static void write_line(const log_limit_t *l, log_level_t level, const char *line)
{
    if (l->emit != NULL)
        l->emit(level, line, l->hook_arg);
    else
        default_emit(level, line, NULL);
}

static uint64_t interval_ms(const log_limit_t *l)
{
    return l->interval_ms > 0 ? l->interval_ms : LOG_LIMIT_INTERVAL_MS;
}

void log_limit_init(log_limit_t *l, const char *recovered, uint64_t interval_ms)
{
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->lock, NULL);
    l->recovered = recovered;
    l->interval_ms = interval_ms > 0 ? interval_ms : LOG_LIMIT_INTERVAL_MS;
    atomic_init(&l->failing, 0);
}

void log_limit_destroy(log_limit_t *l)
{
    pthread_mutex_destroy(&l->lock);
}

void log_limit_set_hooks(log_limit_t *l, log_limit_clock_fn clock, log_limit_emit_fn emit, void *arg)
{
    l->clock = clock;
    l->emit = emit;
    l->hook_arg = arg;
}

/* The slot of key (cut to LOG_LIMIT_KEY_MAX - 1 bytes): the one it has, else
 * a free one, else the least recently used, emptied. *fresh: 1 when it was
 * not tracked. Under lock. */
static log_limit_key_t *slot_for(log_limit_t *l, const char *key, int *fresh)
{
    size_t klen = strnlen(key, LOG_LIMIT_KEY_MAX - 1);
    log_limit_key_t *oldest = NULL;
    for (size_t i = 0; i < l->nkeys; i++) {
        log_limit_key_t *k = &l->keys[i];
        if (strlen(k->key) == klen && memcmp(k->key, key, klen) == 0) {
            *fresh = 0;
            return k;
        }
        if (oldest == NULL || k->used_ms < oldest->used_ms)
            oldest = k;
    }
    log_limit_key_t *k = l->nkeys < LOG_LIMIT_KEYS ? &l->keys[l->nkeys++] : oldest;
    memset(k, 0, sizeof *k);
    memcpy(k->key, key, klen);
    k->key[klen] = '\0';
    *fresh = 1;
    return k;
}

/* One failure (outage: 1) or count (0) of key, its line formatted from fmt
 * and ap. Returns 1 when the line was written. */
#define LOG_LIMIT_LINE_MAX 2048
static int occurred(log_limit_t *l, int outage, log_level_t level, const char *key, const char *fmt, va_list ap)
{
    char line[LOG_LIMIT_LINE_MAX];
    if (vsnprintf(line, sizeof line, fmt, ap) < 0)
        line[0] = '\0';
    if (key == NULL || key[0] == '\0')
        key = line;

    pthread_mutex_lock(&l->lock);
    uint64_t now = now_ms(l);
    if (outage) {
        if (l->failures == 0) {
            l->since_ms = now;
            l->worst = level;
        } else if (level > l->worst) {
            l->worst = level;
        }
        l->failures++;
        atomic_store(&l->failing, 1);
    }
    int fresh;
    log_limit_key_t *k = slot_for(l, key, &fresh);
    k->used_ms = now;
    int wrote = 0;
    if (fresh || now - k->logged_ms >= interval_ms(l)) {
        if (k->suppressed > 0) {
            size_t len = strlen(line);
            snprintf(line + len, LOG_LIMIT_LINE_MAX - len, " (repeated %llu times in the last %.1f s)",
                     (unsigned long long)k->suppressed, (double)(now - k->logged_ms) / 1000);
        }
        write_line(l, level, line);
        k->logged_ms = now;
        k->suppressed = 0;
        wrote = 1;
    } else {
        k->suppressed++;
    }
    pthread_mutex_unlock(&l->lock);
    return wrote;
}

int log_limit_fail(log_limit_t *l, log_level_t level, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int wrote = occurred(l, 1, level, key, fmt, ap);
    va_end(ap);
    return wrote;
}

int log_limit_count(log_limit_t *l, log_level_t level, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int wrote = occurred(l, 0, level, key, fmt, ap);
    va_end(ap);
    return wrote;
}

int log_limit_ok(log_limit_t *l)
{
    if (!atomic_load(&l->failing))
        return 0;
    pthread_mutex_lock(&l->lock);
    int wrote = 0;
    if (l->failures > 0) {
        uint64_t now = now_ms(l);
        char line[256];
        snprintf(line, sizeof line, "%s again after %.1f s; %llu attempt%s failed meanwhile", l->recovered,
                 (double)(now - l->since_ms) / 1000, (unsigned long long)l->failures, l->failures == 1 ? "" : "s");
        write_line(l, l->worst > LOG_LEVEL_WARN ? LOG_LEVEL_WARN : l->worst, line);
        l->failures = 0;
        l->nkeys = 0;
        wrote = 1;
    }
    atomic_store(&l->failing, 0);
    pthread_mutex_unlock(&l->lock);
    return wrote;
}
