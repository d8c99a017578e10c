/*
 * common/uri_password.c — the password of a URI's user:password@ found and
 * taken out (contract: uri_password.h).
 */
#include "common/uri_password.h"

#include <string.h>

int uri_password_span(const char *uri, size_t *start, size_t *len)
{
    const char *scheme_end = strstr(uri, "://");
    const char *userinfo = scheme_end != NULL ? scheme_end + 3 : uri;
    size_t authority = strcspn(userinfo, "/?");
    const char *at = NULL;
    for (size_t i = 0; i < authority; i++)
        if (userinfo[i] == '@')
            at = userinfo + i;
    if (at == NULL)
        return 0;
    const char *colon = memchr(userinfo, ':', (size_t)(at - userinfo));
    if (colon == NULL || colon + 1 == at)
        return 0;
    *start = (size_t)(colon + 1 - uri);
    *len = (size_t)(at - colon - 1);
    return 1;
}

int uri_password_strip(const char *uri, char *buf, size_t len)
{
    size_t start, n, total = strlen(uri);
    int found = uri_password_span(uri, &start, &n);
    size_t keep = found ? total - n - 1 : total;
    if (keep >= len) {
        if (len > 0)
            buf[0] = '\0';
        return -1;
    }
    if (!found) {
        memcpy(buf, uri, total + 1);
        return 0;
    }
    memcpy(buf, uri, start - 1); /* up to the ':' before the password */
    memcpy(buf + start - 1, uri + start + n, total - start - n + 1);
    return 1;
}
