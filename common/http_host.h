/*
 * common/http_host.h — does a request's Host header name this listener?
 * The one matcher of the DNS-rebinding defence, used by the metrics ports
 * (common/http_guard.c) and the console (console/server.c).
 *
 * A web page in a browser can re-point its own DNS name at 127.0.0.1 and
 * then read a loopback listener as a same-origin page; its requests carry
 * that name in Host. A listener therefore answers only a Host that is an IP
 * literal, localhost, its bind address, or a name the operator listed
 * (allowed-hosts, metrics-allowed-hosts): names a rebinding page does not
 * control, so it can never be same-origin with them.
 */
#ifndef HG_COMMON_HTTP_HOST_H
#define HG_COMMON_HTTP_HOST_H

#include <stddef.h>

/* 1 when host (a Host header; NULL: none was sent, HTTP/1.0) names the
 * listener: an IPv4 literal, an IPv6 literal (in brackets, or bare), or a
 * name equal to localhost, bind or an entry of allowed (a comma-separated
 * list, blanks around entries ignored; NULL: none), compared without case,
 * without a port (':' and at most five digits) and without a trailing dot.
 * 0 otherwise (an empty or over-long name, a bracket left open, anything
 * after the name but a port: userinfo, a path, a second port). */
int http_host_allowed(const char *host, const char *bind, const char *allowed);

/* Check a configured list of host names (key: its key, named in err):
 * comma-separated entries of letters, digits, '-', '_' and '.', no port.
 * 0, or -1 with err naming the entry that is not a host name. NULL and ""
 * are fine (an empty list). */
int http_hosts_check(const char *key, const char *list, char *err, size_t errlen);

#endif
