/*
 * lib/rmq_reply.c — reply trees for the RabbitMQ transport.
 *
 * The library above the transport reads resp_reply_t trees (one allocation
 * each, freed with resp_reply_free). The transport writes its answer as the
 * RESP text the broker would send and parses it once with the client-side
 * parser, so every reply has exactly the broker's shape. Pure; any thread.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rmq_w_array(buf_t *b, size_t n)
{
    char head[32];
    int len = snprintf(head, sizeof(head), "*%zu\r\n", n);
    buf_append(b, head, (size_t)len);
}

void rmq_w_int(buf_t *b, long long v)
{
    char head[32];
    int len = snprintf(head, sizeof(head), ":%lld\r\n", v);
    buf_append(b, head, (size_t)len);
}

void rmq_w_bulk(buf_t *b, const void *s, size_t slen)
{
    char head[32];
    int len = snprintf(head, sizeof(head), "$%zu\r\n", slen);
    buf_append(b, head, (size_t)len);
    if (slen > 0)
        buf_append(b, s, slen);
    buf_append(b, "\r\n", 2);
}

void rmq_w_str(buf_t *b, const char *s)
{
    rmq_w_bulk(b, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

void rmq_w_status(buf_t *b, const char *s)
{
    buf_append(b, "+", 1);
    buf_append(b, s, strlen(s));
    buf_append(b, "\r\n", 2);
}

void rmq_w_error(buf_t *b, const char *fmt, ...)
{
    char text[HG_ERRMSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    for (char *p = text; *p != '\0'; p++)
        if (*p == '\r' || *p == '\n')
            *p = ' ';
    buf_append(b, "-", 1);
    buf_append(b, text, strlen(text));
    buf_append(b, "\r\n", 2);
}

hg_err_t rmq_reply_finish(buf_t *b, resp_reply_t **reply)
{
    resp_reply_limits_t limits = RESP_REPLY_LIMITS_DEFAULT;
    char why[128];
    size_t used = 0;
    resp_status_t st;

    limits.max_elements = (size_t)-1;
    st = resp_reply_parse(b->data, b->len, &limits, reply, &used, why, sizeof(why));
    if (st != RESP_OK || used != b->len) {
        fprintf(stderr, "libhourglass: rmq_reply_finish: built an invalid reply (%s)\n", why);
        abort();
    }
    buf_free(b);
    return HG_OK;
}
