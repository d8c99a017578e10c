/*
 * proto/client.c — the client side of the codec (contract: client.h).
 *
 * resp_add_command frames a request with the shared header/bulk writers of
 * resp.c. The reply parser is stateless, two passes over the same code
 * (parse_value): a scan with node == NULL checks one whole reply is present
 * and counts nodes and string bytes; the build pass then fills one
 * allocation. The build pass cannot fail because the scan already walked the
 * same bytes.
 *
 * No globals; runs on whichever thread owns the connection (libhourglass's
 * callers, the test clients).
 */
#include "proto/client.h"

#include "base/alloc.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest double reply text accepted (",<text>\r\n"). */
#define RESP_MAX_DOUBLE_LEN 256

void resp_add_command(buf_t *b, size_t argc, const char *const *argv, const size_t *argvlen)
{
    resp_put_header(b, '*', argc);
    for (size_t i = 0; i < argc; i++)
        resp_put_bulk(b, argv[i], argvlen ? argvlen[i] : strlen(argv[i]));
}

/* ------------------------------------------------------------------------
 * Reply parser
 * ------------------------------------------------------------------------ */

typedef struct reply_ctx {
    const char *buf;
    size_t len;
    size_t max_depth, max_elements, max_bulk;
    size_t elements;     /* declared children so far, all levels */
    size_t str_bytes;    /* string bytes + one NUL each */
    resp_reply_t *nodes; /* build pass only */
    size_t next_node;
    char *strs;
    size_t next_str;
    char *err;
    size_t errlen;
} reply_ctx_t;

static resp_status_t reply_fail(reply_ctx_t *c, resp_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static resp_status_t reply_fail(reply_ctx_t *c, resp_status_t status, const char *fmt, ...)
{
    va_list ap;
    if (c->err != NULL && c->errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}

enum {
    LINE_OK,
    LINE_MORE,
    LINE_BAD_END,
    LINE_TOO_LONG
};

/* Find the line starting at pos, at most maxlen bytes before "\r\n".
 * On LINE_OK: *start, *n, *next (just past the "\r\n"). */
static int read_line(const reply_ctx_t *c, size_t pos, size_t maxlen, size_t *n, size_t *next)
{
    size_t avail = c->len - pos;
    size_t look = (maxlen < avail) ? maxlen + 1 : avail;
    const char *cr = memchr(c->buf + pos, '\r', look);
    size_t k;

    if (cr == NULL)
        return avail > maxlen ? LINE_TOO_LONG : LINE_MORE;
    k = (size_t)(cr - (c->buf + pos));
    if (pos + k + 1 >= c->len)
        return LINE_MORE;
    if (c->buf[pos + k + 1] != '\n')
        return LINE_BAD_END;
    *n = k;
    *next = pos + k + 2;
    return LINE_OK;
}

/* Copy a string into the build arena and point node at it. */
static void reply_set_str(reply_ctx_t *c, resp_reply_t *node, const char *s, size_t n)
{
    if (node == NULL) {
        c->str_bytes = resp_size_add(c->str_bytes, resp_size_add(n, 1));
        return;
    }
    node->str = c->strs + c->next_str;
    node->len = n;
    if (n)
        memcpy(node->str, s, n);
    node->str[n] = '\0';
    c->next_str += n + 1;
}

/* Read a length header line at pos into *v. Returns RESP_OK, NEED_MORE or a
 * protocol error with what (e.g. "bulk") in the message. */
static resp_status_t reply_number(reply_ctx_t *c, size_t pos, const char *what, long long *v, size_t *next)
{
    size_t n;
    int r = read_line(c, pos, RESP_MAX_NUMBER_LEN, &n, next);

    if (r == LINE_MORE)
        return RESP_NEED_MORE;
    if (r != LINE_OK || resp_parse_ll(c->buf + pos, n, v) != 0)
        return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid %s", what);
    return RESP_OK;
}

/* Parse the value at *pos. node == NULL: scan pass (count, allocate nothing);
 * else build pass into node. depth is the number of aggregates around it. */
static resp_status_t parse_value(reply_ctx_t *c, size_t *pos, size_t depth, resp_reply_t *node)
{
    size_t p, n = 0, next = 0;
    unsigned char type;
    long long v = 0;
    resp_status_t st;
    int r;

    if (*pos >= c->len)
        return RESP_NEED_MORE;
    type = (unsigned char)c->buf[*pos];
    p = *pos + 1;
    if (node != NULL)
        memset(node, 0, sizeof *node);

    switch (type) {
    case '+':
    case '-':
        r = read_line(c, p, c->max_bulk, &n, &next);
        if (r == LINE_MORE)
            return RESP_NEED_MORE;
        if (r == LINE_TOO_LONG)
            return reply_fail(c, RESP_ERR_LIMIT, "Protocol error: reply line longer than %zu bytes (max-bulk)",
                              c->max_bulk);
        if (r == LINE_BAD_END)
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: reply line not ended by CRLF");
        if (node)
            node->type = type == '+' ? RESP_REPLY_STATUS : RESP_REPLY_ERROR;
        reply_set_str(c, node, c->buf + p, n);
        break;

    case ':':
        st = reply_number(c, p, "integer reply", &v, &next);
        if (st != RESP_OK)
            return st;
        if (node) {
            node->type = RESP_REPLY_INTEGER;
            node->integer = v;
        }
        break;

    case '_':
        r = read_line(c, p, 0, &n, &next);
        if (r == LINE_MORE)
            return RESP_NEED_MORE;
        if (r != LINE_OK)
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid null reply");
        if (node)
            node->type = RESP_REPLY_NIL;
        break;

    case '#':
        r = read_line(c, p, 1, &n, &next);
        if (r == LINE_MORE)
            return RESP_NEED_MORE;
        if (r != LINE_OK || n != 1 || (c->buf[p] != 't' && c->buf[p] != 'f'))
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid boolean reply");
        if (node) {
            node->type = RESP_REPLY_BOOL;
            node->integer = c->buf[p] == 't';
        }
        break;

    case ',': {
        char text[RESP_MAX_DOUBLE_LEN + 1];
        char *end;
        double d;

        r = read_line(c, p, RESP_MAX_DOUBLE_LEN, &n, &next);
        if (r == LINE_MORE)
            return RESP_NEED_MORE;
        if (r != LINE_OK || n == 0 || resp_is_blank((unsigned char)c->buf[p]))
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid double reply");
        memcpy(text, c->buf + p, n);
        text[n] = '\0';
        d = strtod(text, &end);
        if (end != text + n)
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid double reply");
        if (node) {
            node->type = RESP_REPLY_DOUBLE;
            node->dval = d;
        }
        reply_set_str(c, node, c->buf + p, n);
        break;
    }

    case '(':
        r = read_line(c, p, c->max_bulk, &n, &next);
        if (r == LINE_MORE)
            return RESP_NEED_MORE;
        if (r == LINE_TOO_LONG)
            return reply_fail(c, RESP_ERR_LIMIT, "Protocol error: reply line longer than %zu bytes (max-bulk)",
                              c->max_bulk);
        {
            size_t i = (n > 0 && c->buf[p] == '-') ? 1 : 0;
            int good = r == LINE_OK && n > i;
            for (; good && i < n; i++)
                good = c->buf[p + i] >= '0' && c->buf[p + i] <= '9';
            if (!good)
                return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid big number reply");
        }
        if (node)
            node->type = RESP_REPLY_BIGNUM;
        reply_set_str(c, node, c->buf + p, n);
        break;

    case '$':
    case '!':
    case '=': {
        size_t data;

        st = reply_number(c, p, "bulk length", &v, &data);
        if (st != RESP_OK)
            return st;
        if (v == -1 && type == '$') {
            if (node)
                node->type = RESP_REPLY_NIL;
            next = data;
            break;
        }
        if (v < 0)
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid bulk length");
        if ((unsigned long long)v > c->max_bulk)
            return reply_fail(c, RESP_ERR_LIMIT,
                              "Protocol error: bulk length %lld exceeds the limit of %zu bytes (max-bulk)", v,
                              c->max_bulk);
        n = (size_t)v;
        if (c->len - data < n || c->len - data - n < 2)
            return RESP_NEED_MORE;
        if (c->buf[data + n] != '\r' || c->buf[data + n + 1] != '\n')
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: bulk data not followed by CRLF");
        next = data + n + 2;
        if (type == '=') {
            /* "xxx:" where xxx are printable (format[] is handed out as a C string) */
            int good = n >= 4 && c->buf[data + 3] == ':';
            for (size_t i = 0; good && i < 3; i++)
                good = c->buf[data + i] > ' ' && c->buf[data + i] < 0x7f;
            if (!good)
                return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid verbatim string");
            if (node) {
                node->type = RESP_REPLY_VERBATIM;
                memcpy(node->format, c->buf + data, 3);
                node->format[3] = '\0';
            }
            reply_set_str(c, node, c->buf + data + 4, n - 4);
        } else {
            if (node)
                node->type = type == '$' ? RESP_REPLY_BULK : RESP_REPLY_ERROR;
            reply_set_str(c, node, c->buf + data, n);
        }
        break;
    }

    case '*':
    case '%':
    case '~':
    case '>': {
        size_t count;
        resp_reply_t *children = NULL;

        st = reply_number(c, p, "multibulk length", &v, &next);
        if (st != RESP_OK)
            return st;
        if (v == -1 && type == '*') {
            if (node)
                node->type = RESP_REPLY_NIL;
            break;
        }
        if (v < 0)
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid multibulk length");
        if (depth + 1 > c->max_depth)
            return reply_fail(c, RESP_ERR_LIMIT, "Protocol error: reply nested deeper than %zu levels (max-depth)",
                              c->max_depth);
        if ((unsigned long long)v > c->max_elements || (type == '%' && (unsigned long long)v > c->max_elements / 2))
            return reply_fail(c, RESP_ERR_LIMIT, "Protocol error: reply has more than %zu elements (max-elements)",
                              c->max_elements);
        count = type == '%' ? (size_t)v * 2 : (size_t)v;
        if (count > c->max_elements - c->elements)
            return reply_fail(c, RESP_ERR_LIMIT, "Protocol error: reply has more than %zu elements (max-elements)",
                              c->max_elements);
        c->elements += count;
        if (node) {
            node->type = type == '*'   ? RESP_REPLY_ARRAY
                         : type == '%' ? RESP_REPLY_MAP
                         : type == '~' ? RESP_REPLY_SET
                                       : RESP_REPLY_PUSH;
            node->count = count;
            children = c->nodes + c->next_node;
            node->elements = count ? children : NULL;
            c->next_node += count;
        }
        for (size_t i = 0; i < count; i++) {
            st = parse_value(c, &next, depth + 1, children ? &children[i] : NULL);
            if (st != RESP_OK)
                return st;
        }
        break;
    }

    default: {
        char shown[5];
        resp_printable_byte(shown, type);
        return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: unexpected reply type byte '%s'", shown);
    }
    }
    *pos = next;
    return RESP_OK;
}

resp_status_t resp_reply_parse(const char *buf, size_t len, const resp_reply_limits_t *limits, resp_reply_t **out,
                               size_t *consumed, char *err, size_t errlen)
{
    resp_reply_limits_t lim = RESP_REPLY_LIMITS_DEFAULT;
    reply_ctx_t c;
    size_t pos = 0, nodes, bytes;
    resp_status_t st;
    char *mem;

    *out = NULL;
    *consumed = 0;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (limits != NULL) {
        if (limits->max_depth)
            lim.max_depth = limits->max_depth;
        if (limits->max_elements)
            lim.max_elements = limits->max_elements;
        if (limits->max_bulk)
            lim.max_bulk = limits->max_bulk;
    }
    if (lim.max_depth > RESP_REPLY_DEPTH_CAP)
        lim.max_depth = RESP_REPLY_DEPTH_CAP;

    memset(&c, 0, sizeof c);
    c.buf = buf;
    c.len = len;
    c.max_depth = lim.max_depth;
    c.max_elements = lim.max_elements;
    c.max_bulk = lim.max_bulk;
    c.err = err;
    c.errlen = errlen;

    /* pass 1: is one whole, valid reply there? */
    st = parse_value(&c, &pos, 0, NULL);
    if (st != RESP_OK)
        return st;

    /* pass 2: build it in one allocation */
    nodes = resp_size_add(c.elements, 1);
    if (nodes > SIZE_MAX / sizeof(resp_reply_t))
        resp_size_add(SIZE_MAX, 1); /* aborts */
    bytes = resp_size_add(nodes * sizeof(resp_reply_t), c.str_bytes);
    mem = xrealloc(NULL, bytes);
    c.nodes = (resp_reply_t *)(void *)mem;
    c.strs = mem + nodes * sizeof(resp_reply_t);
    c.next_node = 1;
    c.next_str = 0;
    c.elements = 0;
    pos = 0;
    st = parse_value(&c, &pos, 0, &c.nodes[0]);
    if (st != RESP_OK || c.next_node != nodes || c.next_str != c.str_bytes) {
        /* cannot happen: both passes run the same code on the same bytes */
        fprintf(stderr, "hourglass: resp reply parser passes disagree\n");
        abort();
    }
    *out = c.nodes;
    *consumed = pos;
    return RESP_OK;
}

void resp_reply_free(resp_reply_t *r)
{
    free(r);
}

const char *resp_reply_type_name(resp_reply_type_t t)
{
    switch (t) {
    case RESP_REPLY_STATUS:
        return "status";
    case RESP_REPLY_ERROR:
        return "error";
    case RESP_REPLY_INTEGER:
        return "integer";
    case RESP_REPLY_BULK:
        return "bulk";
    case RESP_REPLY_NIL:
        return "nil";
    case RESP_REPLY_ARRAY:
        return "array";
    case RESP_REPLY_MAP:
        return "map";
    case RESP_REPLY_SET:
        return "set";
    case RESP_REPLY_PUSH:
        return "push";
    case RESP_REPLY_DOUBLE:
        return "double";
    case RESP_REPLY_BOOL:
        return "bool";
    case RESP_REPLY_BIGNUM:
        return "bignum";
    case RESP_REPLY_VERBATIM:
        return "verbatim";
    }
    return "unknown";
}
