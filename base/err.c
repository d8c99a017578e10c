/*
 * base/err.c — the caller-supplied error buffer (contract: err.h).
 */
#include "base/err.h"

#include <stdio.h>
#include <string.h>

int err_vset(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (err != NULL && errlen > 0)
        vsnprintf(err, errlen, fmt, ap);
    return -1;
}

int err_set(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vset(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int err_prefix(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return -1;
    char old[1024];
    snprintf(old, sizeof old, "%s", err);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < errlen)
        snprintf(err + n, errlen - (size_t)n, ": %s", old);
    return -1;
}
