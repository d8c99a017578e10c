/*
 * lib/uri.c — the broker URI parser (contract in uri.h).
 *
 * Grammar (a strict subset of RFC 3986):
 *   uri       = scheme "://" [ userinfo "@" ] host [ ":" port ] [ "/" ]
 *   scheme    = "hourglass" | "hourglass+tls"          (case-insensitive)
 *   userinfo  = user [ ":" password ]  (both percent-decoded; user non-empty; a
 *               password, when its ':' is there, non-empty; without one the
 *               caller supplies it: hg_client_opts_t.password)
 *   host      = reg-name | IPv4 | "[" IPv6 "]"
 *   port      = 1*5DIGIT, 1..65535
 *   query     = "?" param *( "&" param )     (hourglass+tls only)
 *   param     = ( "ca" | "cert" | "key" | "sni" ) "=" value   (percent-decoded)
 * Unknown parameters, fragments and paths other than "/" are refused rather
 * than ignored, so a typo never silently connects somewhere else. Messages never
 * contain the password. Pure, no allocation, thread-safe.
 */
#include "lib/uri.h"

#include "proto/resp.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Write the message and return -1. */
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL && errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Characters allowed unencoded in userinfo (RFC 3986 unreserved and
 * sub-delims; ':' only in the password since the first one splits). */
static int userinfo_char(int c)
{
    return isalnum(c) || strchr("-._~!$&'()*+,;=", c) != NULL;
}

/* The byte of the escape "%XX" at s[i] (s[i] is '%'), or -1 when two hex
 * digits do not follow within s[0..n). */
static int percent_byte(const char *s, size_t i, size_t n)
{
    int hi = i + 1 < n ? resp_hex_value((unsigned char)s[i + 1]) : -1;
    int lo = i + 2 < n ? resp_hex_value((unsigned char)s[i + 2]) : -1;
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Percent-decode src[0..n) into dst[dstlen]. what names the part for
 * messages ("the user name", "the password"); show says whether the text may
 * be echoed (never for the password). Returns 0 / -1. */
static int decode_part(const char *src, size_t n, char *dst, size_t dstlen, const char *what, int show, int allow_colon,
                       char *err, size_t errlen)
{
    size_t out = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '%') {
            int b = percent_byte(src, i, n);
            if (b < 0) {
                if (show)
                    return fail(err, errlen, "bad percent-escape '%.*s' in %s (want %%XX, two hex digits)",
                                (int)(n - i < 3 ? n - i : 3), src + i, what);
                return fail(err, errlen, "bad percent-escape in %s (want %%XX, two hex digits)", what);
            }
            c = (unsigned char)b;
            if (c == 0)
                return fail(err, errlen, "%%00 (a NUL byte) in %s is not allowed", what);
            i += 2;
        } else if (!(userinfo_char(c) || (allow_colon && c == ':'))) {
            if (!show) /* not even the byte: it is one of the password's */
                return fail(err, errlen,
                            "an invalid character in %s (percent-encode every one but letters, digits and "
                            "-._~!$&'()*+,;=:)",
                            what);
            if (isprint(c))
                return fail(err, errlen, "invalid character '%c' in %s (percent-encode it)", c, what);
            return fail(err, errlen, "invalid character 0x%02x in %s (percent-encode it)", c, what);
        }
        if (out + 1 >= dstlen)
            return fail(err, errlen, "%s is longer than %zu bytes", what, dstlen - 1);
        dst[out++] = (char)c;
    }
    dst[out] = '\0';
    return 0;
}

/* A registered name or IPv4 address: letters, digits, '-', '.', '_'. */
static int check_reg_name(const char *h, size_t n, char *err, size_t errlen)
{
    if (n >= URI_HOST_MAX - 2)
        return fail(err, errlen, "host name is longer than %d bytes", URI_HOST_MAX - 3);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c == ':')
            return fail(err, errlen, "unexpected ':' in host '%.*s' (an IPv6 address goes in brackets: [::1])", (int)n,
                        h);
        if (!(isalnum(c) || c == '-' || c == '.' || c == '_')) {
            if (isprint(c))
                return fail(err, errlen, "invalid character '%c' in host '%.*s'", c, (int)n, h);
            return fail(err, errlen, "invalid character 0x%02x in host", c);
        }
    }
    return 0;
}

int uri_parse_port(const char *p, size_t n, int *port, char *err, size_t errlen)
{
    long v = 0;
    int shown = (int)(n > 20 ? 20 : n);

    if (n == 0)
        return fail(err, errlen, "empty port after ':' (want 1..65535)");
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)p[i]))
            return fail(err, errlen, "bad port '%.*s': not a number (want 1..65535)", shown, p);
    for (size_t i = 0; i < n && v <= 65535; i++)
        v = v * 10 + (p[i] - '0');
    if (v < 1 || v > 65535)
        return fail(err, errlen, "bad port '%.*s': out of range (want 1..65535)", shown, p);
    *port = (int)v;
    return 0;
}

const char *uri_address(char *buf, size_t len, const char *host, int port)
{
    snprintf(buf, len, strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d", host, port);
    return buf;
}

/* Percent-decode a query value v[0..n) into dst[dstlen] (any byte but NUL;
 * '&', '=', '#' and '%' must be escaped). Returns 0 / -1. */
static int decode_value(const char *v, size_t n, char *dst, size_t dstlen, const char *name, char *err, size_t errlen)
{
    size_t out = 0;

    if (n == 0)
        return fail(err, errlen, "empty value for URI parameter '%s'", name);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c == '%') {
            int b = percent_byte(v, i, n);
            if (b <= 0)
                return fail(err, errlen, "bad percent-escape in URI parameter '%s' (want %%XX, not %%00)", name);
            c = (unsigned char)b;
            i += 2;
        } else if (c == '=' || c == '#' || c <= 0x20 || c == 0x7f) {
            return fail(err, errlen, "invalid character 0x%02x in URI parameter '%s' (percent-encode it)", c, name);
        }
        if (out + 1 >= dstlen)
            return fail(err, errlen, "URI parameter '%s' is longer than %zu bytes", name, dstlen - 1);
        dst[out++] = (char)c;
    }
    dst[out] = '\0';
    return 0;
}

int uri_parse_tls_query(const char *q, uri_t *u, char *err, size_t errlen)
{
    if (*q == '\0')
        return fail(err, errlen, "empty query after '?' (want ca=, cert=, key= or sni=)");
    while (*q != '\0') {
        size_t n = strcspn(q, "&"), klen = strcspn(q, "=&");
        char *dst;
        size_t dstlen;
        if (klen == 2 && strncmp(q, "ca", 2) == 0)
            dst = u->tls_ca, dstlen = sizeof(u->tls_ca);
        else if (klen == 4 && strncmp(q, "cert", 4) == 0)
            dst = u->tls_cert, dstlen = sizeof(u->tls_cert);
        else if (klen == 3 && strncmp(q, "key", 3) == 0)
            dst = u->tls_key, dstlen = sizeof(u->tls_key);
        else if (klen == 3 && strncmp(q, "sni", 3) == 0)
            dst = u->tls_sni, dstlen = sizeof(u->tls_sni);
        else
            return fail(err, errlen, "unknown URI parameter '%.*s' (want ca, cert, key or sni)",
                        (int)(klen > 40 ? 40 : klen), q);
        if (klen == n)
            return fail(err, errlen, "URI parameter '%.*s' has no value (want %.*s=...)", (int)klen, q, (int)klen, q);
        if (dst[0] != '\0')
            return fail(err, errlen, "URI parameter '%.*s' given twice", (int)klen, q);
        char name[8];
        snprintf(name, sizeof(name), "%.*s", (int)klen, q);
        if (decode_value(q + klen + 1, n - klen - 1, dst, dstlen, name, err, errlen) < 0)
            return -1;
        q += n;
        if (*q == '&') {
            q++;
            if (*q == '\0')
                return fail(err, errlen, "empty URI parameter after the last '&'");
        }
    }
    return 0;
}

int uri_parse(const char *text, int default_port, uri_t *out, char *err, size_t errlen)
{
    const char *sep, *auth, *auth_end, *at, *host, *host_end, *port = NULL;
    size_t scheme_len;
    uri_t u;

    memset(out, 0, sizeof(*out));
    memset(&u, 0, sizeof(u));
    if (text == NULL || *text == '\0')
        return fail(err, errlen, "empty URI (want hourglass://host[:port])");

    sep = strstr(text, "://");
    if (sep == NULL)
        return fail(err, errlen,
                    "missing scheme (want hourglass://host[:port], hourglass+tls://…, amqp://… or amqps://…)");
    scheme_len = (size_t)(sep - text);
    if (scheme_len == 9 && strncasecmp(text, "hourglass", 9) == 0)
        u.tls = 0;
    else if (scheme_len == 13 && strncasecmp(text, "hourglass+tls", 13) == 0)
        u.tls = 1;
    else
        return fail(err, errlen, "unsupported scheme '%.*s' (want hourglass://, hourglass+tls://, amqp:// or amqps://)",
                    (int)(scheme_len > 40 ? 40 : scheme_len), text);

    /* The authority runs to the first '/', '?' or '#'. */
    auth = sep + 3;
    auth_end = auth + strcspn(auth, "/?#");
    if (*auth_end == '/') {
        if (auth_end[1] == '?' && u.tls) {
            if (uri_parse_tls_query(auth_end + 2, &u, err, errlen) < 0)
                return -1;
        } else if (auth_end[1] != '\0')
            return fail(err, errlen, "unexpected path '%.40s' (a broker URI has no path)", auth_end);
    } else if (*auth_end == '?') {
        if (!u.tls)
            return fail(err, errlen, "unexpected query '%.40s' (only hourglass+tls:// takes parameters)", auth_end);
        if (uri_parse_tls_query(auth_end + 1, &u, err, errlen) < 0)
            return -1;
    } else if (*auth_end == '#') {
        return fail(err, errlen, "unexpected fragment '%.40s'", auth_end);
    }

    /* userinfo */
    host = auth;
    at = memchr(auth, '@', (size_t)(auth_end - auth));
    if (at != NULL) {
        const char *colon;
        if (memchr(at + 1, '@', (size_t)(auth_end - at - 1)) != NULL)
            return fail(err, errlen, "more than one '@' (percent-encode '@' in a password as %%40)");
        colon = memchr(auth, ':', (size_t)(at - auth));
        if (colon == auth || at == auth)
            return fail(err, errlen, "empty user name before '@'");
        if (colon == NULL) { /* user@ alone: the password comes from elsewhere (the client checks) */
            if (decode_part(auth, (size_t)(at - auth), u.user, sizeof(u.user), "the user name", 1, 0, err, errlen) < 0)
                return -1;
            u.has_user = 1;
            host = at + 1;
        } else {
            if (decode_part(auth, (size_t)(colon - auth), u.user, sizeof(u.user), "the user name", 1, 0, err, errlen) <
                0)
                return -1;
            if (colon + 1 == at)
                return fail(err, errlen, "empty password for user '%s'", u.user);
            if (decode_part(colon + 1, (size_t)(at - colon - 1), u.password, sizeof(u.password), "the password", 0, 1,
                            err, errlen) < 0)
                return -1;
            u.has_auth = u.has_user = 1;
            host = at + 1;
        }
    }

    /* host [":" port] */
    if (host == auth_end)
        return fail(err, errlen, "missing host");
    if (*host == '[') {
        char addr6[URI_HOST_MAX];
        struct in6_addr a6;
        const char *close = memchr(host, ']', (size_t)(auth_end - host));
        size_t n;
        if (close == NULL)
            return fail(err, errlen, "'[' without ']' in host (want [IPv6]:port)");
        n = (size_t)(close - host - 1);
        if (n == 0)
            return fail(err, errlen, "missing host: empty brackets");
        if (n >= sizeof(addr6))
            return fail(err, errlen, "IPv6 address too long");
        memcpy(addr6, host + 1, n);
        addr6[n] = '\0';
        if (inet_pton(AF_INET6, addr6, &a6) != 1)
            return fail(err, errlen, "bad IPv6 address '%s'", addr6);
        memcpy(u.host, addr6, n + 1);
        host_end = close + 1;
        if (host_end < auth_end) {
            if (*host_end != ':')
                return fail(err, errlen, "unexpected '%c' after ']' (want [IPv6]:port)", *host_end);
            port = host_end + 1;
        }
    } else {
        const char *colon = memchr(host, ':', (size_t)(auth_end - host));
        size_t n;
        host_end = auth_end;
        if (colon != NULL) {
            if (memchr(colon + 1, ':', (size_t)(auth_end - colon - 1)) != NULL)
                return fail(err, errlen,
                            "more than one ':' in host and port (an IPv6 address goes in brackets: [::1])");
            host_end = colon;
            port = colon + 1;
        }
        n = (size_t)(host_end - host);
        if (n == 0)
            return fail(err, errlen, "missing host");
        if (check_reg_name(host, n, err, errlen) < 0)
            return -1;
        memcpy(u.host, host, n);
        u.host[n] = '\0';
    }

    if (port != NULL) {
        if (uri_parse_port(port, (size_t)(auth_end - port), &u.port, err, errlen) < 0)
            return -1;
    } else {
        if (default_port < 1 || default_port > 65535)
            return fail(err, errlen, "no port in URI and no valid default");
        u.port = default_port;
    }
    *out = u;
    return 0;
}
