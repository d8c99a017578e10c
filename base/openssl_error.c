/*
 * base/openssl_error.c — OpenSSL's error queue as text (contract:
 * openssl_error.h): ERR_reason_error_string (strerror for a system error:
 * OpenSSL keeps its errno as the reason, with no text), and
 * ERR_error_string_n when a reason has no text.
 */
#include "base/openssl_error.h"

#include <stdio.h>
#include <string.h>

#include <openssl/err.h>

const char *openssl_error_text(unsigned long e, char *buf, size_t len)
{
    if (len == 0)
        return buf;
    const char *reason = e == 0 ? NULL : ERR_SYSTEM_ERROR(e) ? strerror(ERR_GET_REASON(e)) : ERR_reason_error_string(e);
    if (reason != NULL)
        snprintf(buf, len, "%s", reason);
    else if (e != 0)
        ERR_error_string_n(e, buf, len);
    else
        buf[0] = '\0';
    return buf;
}

const char *openssl_last_error(char *buf, size_t len, const char *none)
{
    unsigned long e = ERR_peek_last_error();
    if (e != 0)
        openssl_error_text(e, buf, len);
    else if (len > 0)
        snprintf(buf, len, "%s", none);
    ERR_clear_error();
    return buf;
}

const char *openssl_errors_join(unsigned long (*next)(void *arg), void *arg, char *buf, size_t len)
{
    size_t used = 0;
    unsigned long e;
    if (len > 0)
        buf[0] = '\0';
    while ((e = next(arg)) != 0) {
        if (ERR_GET_LIB(e) == 0 || used + 3 >= len)
            continue; /* libevent also records SSL_get_error's bare code: no reason text; or no room: drained */
        char one[256];
        int n = snprintf(buf + used, len - used, "%s%s", used ? "; " : "", openssl_error_text(e, one, sizeof one));
        if (n > 0)
            used += (size_t)n < len - used ? (size_t)n : len - used - 1;
    }
    return buf;
}

unsigned long openssl_thread_error(void *arg)
{
    (void)arg;
    return ERR_get_error();
}

const char *openssl_errors(char *buf, size_t len)
{
    return openssl_errors_join(openssl_thread_error, NULL, buf, len);
}
