/*
 * broker/authfail.c — the per-address failed-AUTH counts (contract in
 * authfail.h).
 *
 * A hash map from address to entry, and the entries in a doubly-linked list
 * in order of their last failure (the head failed least recently): a failure
 * moves its entry to the tail, a new address in a full table evicts the head.
 * Every operation is O(1) besides the map's hashing. authfail_key turns a
 * client's address into the key: IPv6 addresses by their /64.
 *
 * One thread at a time (the broker's AUTH verification thread).
 */
#include "broker/authfail.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/map.h"

typedef struct fail_entry {
    char addr[AUTHFAIL_ADDR_MAX + 1]; /* the map's key too */
    size_t len;
    unsigned n;                     /* failures within the window, as of last_ms */
    uint64_t last_ms;               /* the last failure */
    struct fail_entry *prev, *next; /* the list by last failure: prev failed earlier */
} fail_entry_t;

struct authfail {
    map_t by_addr;             /* addr -> fail_entry_t */
    fail_entry_t *head, *tail; /* head: least recently failed */
    size_t max_addrs;
    uint64_t window_ms;
};

char *authfail_key(const char *addr, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s", addr);
    char *colon = strrchr(out, ':');
    if (out[0] != '[') {
        if (colon != NULL) {
            *colon = '\0'; /* "1.2.3.4:5" -> "1.2.3.4" */
        }
        return out;
    }
    char *end = strchr(out, ']');
    if (end == NULL) {
        return out;
    }
    *end = '\0';
    struct in6_addr a;
    char text[INET6_ADDRSTRLEN];
    if (inet_pton(AF_INET6, out + 1, &a) != 1) {
        snprintf(out, outlen, "%.*s", (int)(end - out + 1), addr); /* "[x]" as it came */
        return out;
    }
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
        inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof text);
        snprintf(out, outlen, "%s", text);
        return out;
    }
    memset(&a.s6_addr[8], 0, 8);
    inet_ntop(AF_INET6, &a, text, sizeof text);
    snprintf(out, outlen, "[%s/64]", text);
    return out;
}

authfail_t *authfail_new(size_t max_addrs, uint64_t window_ms)
{
    authfail_t *t = xcalloc(1, sizeof *t);
    map_init(&t->by_addr);
    t->max_addrs = max_addrs > 0 ? max_addrs : 1;
    t->window_ms = window_ms;
    return t;
}

void authfail_free(authfail_t *t)
{
    if (t == NULL) {
        return;
    }
    map_free(&t->by_addr, free);
    free(t);
}

static void unlink_entry(authfail_t *t, fail_entry_t *e)
{
    if (e->prev) {
        e->prev->next = e->next;
    } else {
        t->head = e->next;
    }
    if (e->next) {
        e->next->prev = e->prev;
    } else {
        t->tail = e->prev;
    }
    e->prev = e->next = NULL;
}

static void append_entry(authfail_t *t, fail_entry_t *e)
{
    e->prev = t->tail;
    e->next = NULL;
    if (t->tail) {
        t->tail->next = e;
    } else {
        t->head = e;
    }
    t->tail = e;
}

unsigned authfail_count(authfail_t *t, const char *addr, size_t len, uint64_t now_ms)
{
    if (len > AUTHFAIL_ADDR_MAX) {
        len = AUTHFAIL_ADDR_MAX;
    }
    fail_entry_t *e = map_get(&t->by_addr, addr, len);
    if (e != NULL) {
        unlink_entry(t, e);
        if (now_ms - e->last_ms > t->window_ms) {
            e->n = 0;
        }
    } else {
        if (map_count(&t->by_addr) >= t->max_addrs) { /* forget the least recently failed address */
            fail_entry_t *old = t->head;
            unlink_entry(t, old);
            map_del(&t->by_addr, old->addr, old->len);
            free(old);
        }
        e = xcalloc(1, sizeof *e);
        memcpy(e->addr, addr, len);
        e->len = len;
        map_put(&t->by_addr, e->addr, e->len, e);
    }
    e->n++;
    e->last_ms = now_ms;
    append_entry(t, e);
    return e->n;
}

unsigned authfail_get(const authfail_t *t, const char *addr, size_t len)
{
    if (len > AUTHFAIL_ADDR_MAX) {
        len = AUTHFAIL_ADDR_MAX;
    }
    const fail_entry_t *e = map_get(&t->by_addr, addr, len);
    return e != NULL ? e->n : 0;
}

unsigned authfail_recent(const authfail_t *t, const char *addr, size_t len, uint64_t now_ms, uint64_t *last_ms)
{
    if (len > AUTHFAIL_ADDR_MAX) {
        len = AUTHFAIL_ADDR_MAX;
    }
    const fail_entry_t *e = map_get(&t->by_addr, addr, len);
    if (e == NULL || now_ms - e->last_ms > t->window_ms) {
        return 0;
    }
    *last_ms = e->last_ms;
    return e->n;
}

size_t authfail_size(const authfail_t *t)
{
    return map_count(&t->by_addr);
}
