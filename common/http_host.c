/*
 * common/http_host.c — the Host header matcher of the DNS-rebinding
 * defence and the check of a configured list of host names (contract:
 * http_host.h). Pure functions: any thread.
 */
#include "common/http_host.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define HTTP_HOST_NAME_MAX 253 /* the longest DNS name */

/* A host name of a configured list: letters, digits, '-', '_' and '.'. */
static int host_name_ok(const char *name, size_t n)
{
    if (n == 0 || n > HTTP_HOST_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && name[i] != '-' && name[i] != '_' && name[i] != '.')
            return 0;
    return 1;
}

/* The next entry of the comma-separated list at *p, blanks around it
 * trimmed: its start, its length in *len; *p moves past it (and its comma).
 * NULL at the end of the list. */
static const char *next_host(const char **p, size_t *len)
{
    if (*p == NULL || **p == '\0')
        return NULL;
    size_t n = strcspn(*p, ","), lead = strspn(*p, " \t");
    const char *entry = *p + (lead < n ? lead : n);
    *len = n > lead ? n - lead : 0;
    while (*len > 0 && (entry[*len - 1] == ' ' || entry[*len - 1] == '\t'))
        (*len)--;
    *p += n + ((*p)[n] == ',');
    return entry;
}

int http_hosts_check(const char *key, const char *list, char *err, size_t errlen)
{
    size_t len;
    for (const char *p = list, *entry; (entry = next_host(&p, &len)) != NULL;)
        if (!host_name_ok(entry, len)) {
            snprintf(err, errlen, "%s: '%.*s' is not a host name (letters, digits, '-', '_', '.'; no port)", key,
                     (int)(len > 200 ? 200 : len), entry);
            return -1;
        }
    return 0;
}

/* Is name (n bytes, no trailing dot) an entry of list? */
static int listed(const char *list, const char *name, size_t n)
{
    size_t len;
    for (const char *p = list, *entry; (entry = next_host(&p, &len)) != NULL;) {
        if (len > 0 && entry[len - 1] == '.')
            len--;
        if (len == n && strncasecmp(entry, name, n) == 0)
            return 1;
    }
    return 0;
}

/* 1 when rest, what follows the host in a Host header, is nothing or a port:
 * ':' and at most five digits (none: "localhost:" is Host's grammar too).
 * Anything else (userinfo, a path, a second port) makes the Host malformed. */
static int port_ok(const char *rest)
{
    if (rest[0] == '\0')
        return 1;
    size_t digits = strspn(rest + 1, "0123456789");
    return rest[0] == ':' && digits <= 5 && rest[1 + digits] == '\0';
}

int http_host_allowed(const char *host, const char *bind, const char *allowed)
{
    char name[HTTP_HOST_NAME_MAX + 2];
    struct in_addr a4;
    struct in6_addr a6;
    size_t n;

    if (host == NULL)
        return 1;         /* no Host header: HTTP/1.0; no browser sends that */
    if (host[0] == '[') { /* [v6]:port */
        const char *end = strchr(host, ']');
        n = end != NULL ? (size_t)(end - host - 1) : 0;
        if (end == NULL || n >= sizeof name || !port_ok(end + 1))
            return 0;
        memcpy(name, host + 1, n);
        name[n] = '\0';
        return inet_pton(AF_INET6, name, &a6) == 1;
    }
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return 1; /* a bare v6 literal: not Host's form, but no name either */
    n = strcspn(host, ":");
    if (n == 0 || n >= sizeof name || !port_ok(host + n))
        return 0;
    memcpy(name, host, n);
    name[n] = '\0';
    if (name[n - 1] == '.') /* the absolute form of a name, "localhost." */
        name[--n] = '\0';
    if (n == 0)
        return 0;
    if (inet_pton(AF_INET, name, &a4) == 1 || strcasecmp(name, "localhost") == 0)
        return 1;
    return (bind != NULL && strcasecmp(name, bind) == 0) || listed(allowed, name, n);
}
