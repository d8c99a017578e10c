/*
 * base/alloc.c — allocation wrappers with the one out-of-memory policy
 * (contract and rationale: alloc.h).
 */
#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void (*oom_hook)(size_t n);

void xalloc_set_oom_hook(void (*hook)(size_t n))
{
    oom_hook = hook;
}

void xalloc_oom(size_t n)
{
    if (oom_hook != NULL)
        oom_hook(n);
    fprintf(stderr, "hourglass: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        xalloc_oom(n);
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    if (count == 0 || size == 0)
        count = size = 1;
    void *p = calloc(count, size);
    if (p == NULL)
        xalloc_oom(size > 0 && count > ((size_t)-1) / size ? (size_t)-1 : count * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL)
        xalloc_oom(n);
    return q;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void *xmemdup(const void *p, size_t n)
{
    void *q = xmalloc(n);
    if (n > 0)
        memcpy(q, p, n);
    return q;
}
