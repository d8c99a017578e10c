/*
 * tests/fuzz/fuzz_http_host.c — libFuzzer target: the DNS-rebinding
 * defence's Host matcher and the check of a configured host list
 * (common/http_host.c). A Host header is whatever the client sends.
 *
 * The first input byte picks the mode, the rest is text (up to its first NUL):
 *   Host header  matched against bind "broker.internal" and the list
 *                "console.example, Ops.Example." : when it is accepted, its
 *                name (before the port, or in brackets) must be an IP
 *                literal, localhost, the bind address or a listed name —
 *                a page that rebinds its own name must never pass.
 *   host list    checked as allowed-hosts: when accepted, each entry it
 *                holds, sent as a Host header (with and without a port),
 *                must be allowed by that list.
 * A failed check calls abort(), which libFuzzer reports as a crash.
 */
#include "common/http_host.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#include "tests/fuzz/fuzz_check.h"

#define BIND    "broker.internal"
#define ALLOWED "console.example, Ops.Example."

/* Is name (n bytes) one the listener may answer to by name? */
static int known_name(const char *name, size_t n)
{
    static const char *const names[] = { "localhost", BIND, "console.example", "ops.example" };
    if (n > 0 && name[n - 1] == '.') {
        n--;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strlen(names[i]) == n && strncasecmp(names[i], name, n) == 0) {
            return 1;
        }
    }
    return 0;
}

static int ip_literal(const char *name, size_t n)
{
    char buf[300];
    unsigned char addr[16];
    if (n >= sizeof buf) {
        return 0;
    }
    memcpy(buf, name, n);
    buf[n] = '\0';
    return inet_pton(AF_INET, buf, addr) == 1 || inet_pton(AF_INET6, buf, addr) == 1;
}

static void check_host(const char *host)
{
    if (!http_host_allowed(host, BIND, ALLOWED)) {
        return;
    }
    if (ip_literal(host, strlen(host))) {
        return; /* a bare IPv6 literal */
    }
    if (host[0] == '[') {
        const char *end = strchr(host, ']');
        CHECK(end != NULL && ip_literal(host + 1, (size_t)(end - host - 1)));
        return;
    }
    size_t n = strcspn(host, ":");
    CHECK(ip_literal(host, n) || (n > 0 && host[n - 1] == '.' && ip_literal(host, n - 1)) || known_name(host, n));
}

static void check_list(const char *list)
{
    char err[512] = "";
    if (http_hosts_check("allowed-hosts", list, err, sizeof err) != 0) {
        CHECK(strncmp(err, "allowed-hosts: ", strlen("allowed-hosts: ")) == 0);
        return;
    }
    for (const char *p = list; *p != '\0';) {
        size_t n = strcspn(p, ","), lead = strspn(p, " \t");
        size_t len = n > lead ? n - lead : 0;
        while (len > 0 && (p[lead + len - 1] == ' ' || p[lead + len - 1] == '\t')) {
            len--;
        }
        char host[300];
        CHECK(len > 0 && len < 254);
        /* "." alone is the root, never a Host: its name is empty */
        if (!(len == 1 && p[lead] == '.')) {
            snprintf(host, sizeof host, "%.*s", (int)len, p + lead);
            CHECK(http_host_allowed(host, NULL, list) == 1);
            snprintf(host, sizeof host, "%.*s:8080", (int)len, p + lead);
            CHECK(http_host_allowed(host, NULL, list) == 1);
        }
        p += n + (p[n] == ',');
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    /* an allocation of exactly the string, so a read past its NUL is ASan's */
    char *text = malloc(size);
    CHECK(text != NULL);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    if (data[0] & 1) {
        check_list(text);
    } else {
        check_host(text);
    }
    free(text);
    return 0;
}
