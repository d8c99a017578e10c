/*
 * broker/authfail.h — the per-address count of failed AUTHs behind the
 * failure slow-down (auth.h): how many times an address failed within the
 * last window, in a table of a bounded number of addresses.
 *
 * When the table is full, a failure from a new address forgets the address
 * whose last failure is the oldest (least recently failed first), never the
 * others: filling the table from many source addresses cannot wipe the count
 * of an address that failed recently. An address needs max_addrs failures
 * from other addresses after its last one to be forgotten, and each failure
 * costs the one verification thread a full password hash, so with the
 * default table (auth.c) that takes longer than the window anyway.
 *
 * Addresses are keyed by authfail_key: IPv6 ones by their /64.
 *
 * Memory: at most max_addrs entries (an address is at most
 * AUTHFAIL_ADDR_MAX bytes; longer ones are cut). Not thread-safe: a table
 * belongs to one thread (the broker's AUTH verification thread).
 */
#ifndef HG_BROKER_AUTHFAIL_H
#define HG_BROKER_AUTHFAIL_H

#include <stddef.h>
#include <stdint.h>

#define AUTHFAIL_ADDR_MAX 63 /* bytes of an address kept (auth_req_t.ip holds at most this) */

typedef struct authfail authfail_t;

/* The key failures of the client at addr ("ip:port" or "[ipv6]:port", as
 * the broker shows addresses) are counted under, into out[outlen] (at least
 * AUTHFAIL_ADDR_MAX + 1): the address without the port, and for IPv6 its
 * /64 ("[2001:db8:1:2::/64]") — one host usually holds a whole /64, so
 * counting per IPv6 address would give it 2^64 fresh counts. An IPv4-mapped
 * address ("[::ffff:192.0.2.1]") counts as its IPv4 address. Returns out. */
char *authfail_key(const char *addr, char *out, size_t outlen);

/* A new, empty table of at most max_addrs (>= 1) addresses, counting
 * failures within window_ms of each other. Never fails (aborts on
 * out-of-memory). */
authfail_t *authfail_new(size_t max_addrs, uint64_t window_ms);

/* Free t and its entries. NULL is fine. */
void authfail_free(authfail_t *t);

/* Count a failure from addr (len bytes) at now_ms (a monotonic clock):
 * returns the failures from addr within the window, this one included (1
 * when its last one is older than the window, or it is new). A new address
 * in a full table first forgets the least recently failed one. */
unsigned authfail_count(authfail_t *t, const char *addr, size_t len, uint64_t now_ms);

/* The failures counted for addr so far (0 when it is not remembered), as the
 * last authfail_count returned them; the window is not applied. */
unsigned authfail_get(const authfail_t *t, const char *addr, size_t len);

/* The failures of addr within the window as of now_ms (0 when none, or it
 * is not remembered), and in *last_ms (when not 0 is returned) the time of
 * the latest. */
unsigned authfail_recent(const authfail_t *t, const char *addr, size_t len, uint64_t now_ms, uint64_t *last_ms);

/* Addresses remembered now (<= max_addrs). */
size_t authfail_size(const authfail_t *t);

#endif
