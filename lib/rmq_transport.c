/*
 * lib/rmq_transport.c — the RabbitMQ transport's table (lib/transport.h):
 * the URI, the state, and which broker command runs where.
 *
 * URI: amqp://[user:pass@]host[:port][,host[:port]...][/vhost][?levels=TABLE]
 *      amqps://…[/vhost][?levels=TABLE&ca=FILE&cert=FILE&key=FILE&sni=NAME]
 *   user and password default to guest/guest (a user@ without ":pass"
 *   takes opts.password, refused without one), port to 5672 (amqps: 5671),
 *   the vhost to "/" (an empty path too); percent-escapes as RabbitMQ's URI
 *   spec. Several hosts (the nodes of a cluster) are tried in turn when
 *   connecting and reconnecting. amqps:// takes the same TLS parameters as
 *   hourglass+tls:// (lib/uri.h), and the client's tls_* options fill what
 *   the URI leaves out (lib/rmq_conn.c makes the TLS socket). levels= is
 *   the level table (lvl_table_parse: "1s,5s,10s"; RocketMQ's 18 levels
 *   without it): every client of a vhost must give the same one, since the
 *   level queues' TTLs are checked when declared (rmq_topology.c).
 *
 * Commands: SEND PULL ACK NACK (rmq_msg.c), LEVELS GROUP DLQ (rmq_admin.c),
 * PING. Everything else — TOUCH (a delivery is held until ACK/NACK or the
 * connection ends: there is no lease to renew), GET, REVOKE, INFO, CONFIG,
 * AUTH ... — fails with HG_ERR_UNSUPPORTED naming the command and amqp://.
 *
 * One thread per client.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"
#include "lib/client.h"
#include "lib/uri.h"

#include "base/alloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct transport_state {
    rmq_t r;
};

rmq_t *rmq_of(transport_state_t *t)
{
    return &t->r;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The value of levels= (percent-escapes decoded) as r's level table, checked
 * by lvl_table_parse. 0, or -1 with why. */
static int parse_levels(rmq_t *r, const char *value, size_t len, char *why, size_t whylen)
{
    char spec[1024], err[HG_ERRMSG_MAX - 96];
    size_t n = 0;

    for (size_t i = 0; i < len; i++) {
        int hi, lo;
        if (n + 1 >= sizeof(spec))
            return snprintf(why, whylen, "URI parameter levels is longer than %zu bytes", sizeof(spec) - 1), -1;
        if (value[i] == '%' && i + 2 < len && (hi = hex_digit(value[i + 1])) >= 0 &&
            (lo = hex_digit(value[i + 2])) >= 0) {
            spec[n++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            spec[n++] = value[i] == '+' ? ' ' : value[i];
        }
    }
    spec[n] = '\0';
    if (lvl_table_parse(spec, &r->levels, err, sizeof(err)) < 0)
        return snprintf(why, whylen, "URI parameter levels=%.60s: %.120s", spec, err), -1;
    return 0;
}

/* Split query q (after '?') into levels= (parsed into r->levels) and the
 * TLS parameters (copied into tls_query[len], '&'-joined, for
 * uri_parse_tls_query; refused on amqp://). 0, or -1 with why. */
static int split_query(rmq_t *r, const char *q, char *tls_query, size_t len, char *why, size_t whylen)
{
    size_t used = 0;
    int levels_seen = 0;

    tls_query[0] = '\0';
    if (*q == '\0')
        return snprintf(why, whylen, "empty query after '?'"), -1;
    while (*q != '\0') {
        size_t n = strcspn(q, "&"), klen = strcspn(q, "=&");
        if (klen == 6 && strncmp(q, "levels", 6) == 0) {
            if (levels_seen++)
                return snprintf(why, whylen, "URI parameter 'levels' given twice"), -1;
            if (klen == n)
                return snprintf(why, whylen, "URI parameter 'levels' has no value (want levels=1s,5s,...)"), -1;
            if (parse_levels(r, q + klen + 1, n - klen - 1, why, whylen) < 0)
                return -1;
        } else if (!r->tls) {
            return snprintf(why, whylen,
                            "unknown URI parameter '%.*s' (amqp:// takes levels=; amqps:// also ca, "
                            "cert, key and sni)",
                            (int)(klen > 40 ? 40 : klen), q),
                   -1;
        } else {
            if (used + n + 2 > len)
                return snprintf(why, whylen, "URI parameters longer than %zu bytes", len - 1), -1;
            used += (size_t)snprintf(tls_query + used, len - used, "%s%.*s", used > 0 ? "&" : "", (int)n, q);
        }
        q += n;
        if (*q == '&' && *++q == '\0')
            return snprintf(why, whylen, "empty URI parameter after the last '&'"), -1;
    }
    return 0;
}

/* The port of one host[:port] of the list (host a name, IPv4 or [IPv6]),
 * checked as hourglass:// checks its own (uri_parse_port), so a bad one is
 * named ("bad port '99999': out of range (want 1..65535)") rather than
 * making the whole entry "not host[:port]". 0 (also without a port, or
 * when the entry is malformed otherwise: amqp_parse_url says so), or -1
 * with why. */
static int check_port(const char *entry, size_t len, char *why, size_t whylen)
{
    const char *end = entry + len, *colon = NULL;
    int port;

    if (len > 0 && entry[0] == '[') {
        const char *close = memchr(entry, ']', len);
        if (close == NULL || close + 1 == end || close[1] != ':')
            return 0;
        colon = close + 1;
    } else {
        colon = memchr(entry, ':', len);
        if (colon == NULL || memchr(colon + 1, ':', (size_t)(end - colon - 1)) != NULL)
            return 0; /* none, or an IPv6 address without brackets */
    }
    return uri_parse_port(colon + 1, (size_t)(end - colon - 1), &port, why, whylen);
}

/* Parse uri into r's hosts, user, password, vhost, level table (default, or
 * levels=). 0, or -1 with why. */
static int parse_uri(rmq_t *r, const char *uri, char *why, size_t whylen)
{
    const char *rest = strstr(uri, "://"), *slash, *at, *hosts, *query;
    char userinfo[600] = "", path[600] = "", authority[1024], without_query[2048], tls_query[4200];
    size_t alen;

    lvl_table_default(&r->levels);
    if (rest == NULL)
        return snprintf(why, whylen, "missing scheme"), -1;
    r->tls = strncasecmp(uri, "amqps://", 8) == 0;
    rest += 3;
    query = strchr(rest, '?');
    if (query != NULL) {
        uri_t tls;
        size_t before = (size_t)(query - rest);
        if (before >= sizeof(without_query))
            return snprintf(why, whylen, "URI longer than %zu bytes", sizeof(without_query) - 1), -1;
        memset(&tls, 0, sizeof(tls));
        if (split_query(r, query + 1, tls_query, sizeof(tls_query), why, whylen) < 0 ||
            (tls_query[0] != '\0' && uri_parse_tls_query(tls_query, &tls, why, whylen) < 0))
            return -1;
        snprintf(r->tls_ca, sizeof(r->tls_ca), "%s", tls.tls_ca);
        snprintf(r->tls_cert, sizeof(r->tls_cert), "%s", tls.tls_cert);
        snprintf(r->tls_key, sizeof(r->tls_key), "%s", tls.tls_key);
        snprintf(r->tls_sni, sizeof(r->tls_sni), "%s", tls.tls_sni);
        memcpy(without_query, rest, before);
        without_query[before] = '\0';
        rest = without_query;
    }
    slash = strchr(rest, '/');
    alen = slash != NULL ? (size_t)(slash - rest) : strlen(rest);
    if (alen == 0 || alen >= sizeof(authority))
        return snprintf(why, whylen, "missing host"), -1;
    memcpy(authority, rest, alen);
    authority[alen] = '\0';
    if (slash != NULL)
        snprintf(path, sizeof(path), "%s", slash);
    if (strpbrk(path, "?#") != NULL)
        return snprintf(why, whylen, "query strings and fragments are not supported in amqp:// URIs"), -1;
    at = strrchr(authority, '@');
    hosts = authority;
    if (at != NULL) {
        snprintf(userinfo, sizeof(userinfo), "%.*s@", (int)(at - authority), authority);
        hosts = at + 1;
    }
    r->nhosts = 0;
    while (*hosts != '\0') {
        const char *comma = strchr(hosts, ',');
        size_t hlen = comma != NULL ? (size_t)(comma - hosts) : strlen(hosts);
        struct amqp_connection_info info;
        char one[2300];
        if (hlen == 0)
            return snprintf(why, whylen, "empty host in the host list"), -1;
        if (check_port(hosts, hlen, why, whylen) < 0)
            return -1;
        if (r->nhosts == RMQ_MAX_HOSTS)
            return snprintf(why, whylen, "more than %d hosts", RMQ_MAX_HOSTS), -1;
        snprintf(one, sizeof(one), "%s://%s%.*s%s", r->tls ? "amqps" : "amqp", userinfo, (int)hlen, hosts,
                 path[0] ? path : "/");
        if (amqp_parse_url(one, &info) != AMQP_STATUS_OK)
            return snprintf(why, whylen, "'%.*s' is not host[:port] with a valid user:pass@ and /vhost", (int)hlen,
                            hosts),
                   -1;
        if (info.port < 1 || info.port > 65535) /* port 0 (check_port saw the text) */
            return snprintf(why, whylen, "bad port '%d': out of range (want 1..65535)", info.port), -1;
        snprintf(r->hosts[r->nhosts].host, sizeof(r->hosts[0].host), "%s", info.host);
        r->hosts[r->nhosts].port = info.port;
        r->nhosts++;
        snprintf(r->user, sizeof(r->user), "%s", info.user);
        snprintf(r->password, sizeof(r->password), "%s", info.password);
        snprintf(r->vhost, sizeof(r->vhost), "%s", info.vhost[0] != '\0' ? info.vhost : "/");
        memset(one, 0, sizeof(one));
        hosts += hlen + (comma != NULL ? 1 : 0);
        if (comma != NULL && *hosts == '\0')
            return snprintf(why, whylen, "empty host in the host list"), -1;
    }
    memset(userinfo, 0, sizeof(userinfo));
    memset(without_query, 0, sizeof(without_query));
    memset(authority, 0, sizeof(authority));
    return r->nhosts > 0 ? 0 : (snprintf(why, whylen, "missing host"), -1);
}

/* The login of opts (opts.user, opts.password: the daemons' user and
 * password-file keys, the CLI's --user / --password-file) over the URI's,
 * as on hourglass://: each one given wins; a user without a password
 * anywhere is refused. uri_auth: the URI had user:pass@ (else r holds
 * amqp's default guest/guest). 0, or -1 with why. */
static int apply_login(rmq_t *r, const hg_client_opts_t *o, int uri_auth, char *why, size_t whylen)
{
    if (o->user == NULL && o->password == NULL)
        return 0;
    if (o->user != NULL && o->password == NULL && !uri_auth)
        return snprintf(why, whylen, "no password given for user '%.64s'", o->user), -1;
    if (o->user != NULL && o->user[0] == '\0')
        return snprintf(why, whylen, "user is empty"), -1;
    if ((o->user != NULL && strlen(o->user) >= sizeof(r->user)) ||
        (o->password != NULL && strlen(o->password) >= sizeof(r->password)))
        return snprintf(why, whylen, "user or password longer than %zu bytes", sizeof(r->user) - 1), -1;
    if (o->user != NULL)
        snprintf(r->user, sizeof(r->user), "%s", o->user);
    if (o->password != NULL)
        snprintf(r->password, sizeof(r->password), "%s", o->password);
    return 0;
}

/* Every host of r's URI as messages show them, comma-separated
 * ("h1:5672,h2:5672"), into buf[len] (cut short when it does not fit). */
static void hosts_list(const rmq_t *r, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < r->nhosts && used + 1 < len; i++) {
        char one[300];
        int n = snprintf(buf + used, len - used, "%s%s", i > 0 ? "," : "",
                         uri_address(one, sizeof(one), r->hosts[i].host, r->hosts[i].port));
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
}

static hg_err_t rmq_create(hg_client_t *c, const char *uri, transport_state_t **out, char *address, size_t addrlen,
                           hg_error_t *err)
{
    transport_state_t *t;
    char why[HG_ERRMSG_MAX - 48];
    const char *rest = strstr(uri, "://");
    size_t authority = rest != NULL ? strcspn(rest + 3, "/?#") : 0;
    const char *at = NULL;
    for (size_t i = 0; i < authority; i++) /* the last '@' of the authority, as parse_uri takes it */
        if (rest[3 + i] == '@')
            at = rest + 3 + i;
    /* user:pass@ gives the login; user@ alone names the user, whose
     * password must come from opts.password (as on hourglass://: amqp's own
     * parser would pair it with the default password "guest") */
    int uri_auth = at != NULL && memchr(rest + 3, ':', (size_t)(at - (rest + 3))) != NULL;
    int uri_user_only = at != NULL && !uri_auth;

    *out = NULL;
    t = xcalloc(1, sizeof(*t));
    if (parse_uri(&t->r, uri, why, sizeof(why)) < 0) {
        client_error_fill(err, HG_ERR_URI, "bad URI: %s", why);
        memset(t, 0, sizeof(*t));
        free(t);
        return HG_ERR_URI;
    }
    if (uri_user_only && client_opts(c)->password == NULL) {
        client_error_fill(err, HG_ERR_ARG, "no password given for user '%.64s' (named in the URI)", t->r.user);
        memset(t, 0, sizeof(*t));
        free(t);
        return HG_ERR_ARG;
    }
    if (apply_login(&t->r, client_opts(c), uri_auth || uri_user_only, why, sizeof(why)) < 0) {
        client_error_fill(err, HG_ERR_ARG, "%s", why);
        memset(t, 0, sizeof(*t));
        free(t);
        return HG_ERR_ARG;
    }
    t->r.client = c;
    if ((t->r.watchdog = rmq_watchdog_new()) == NULL) { /* the guard's thread (rmq_watchdog.c) */
        client_error_fill(err, HG_ERR_SYSTEM, "cannot start the thread that bounds calls to RabbitMQ: %s",
                          strerror(errno));
        memset(t, 0, sizeof(*t));
        free(t);
        return HG_ERR_SYSTEM;
    }
    uri_address(t->r.address, sizeof(t->r.address), t->r.hosts[0].host, t->r.hosts[0].port);
    hosts_list(&t->r, address, addrlen);
    t->r.client_address = address;
    t->r.client_addrlen = addrlen;
    *out = t;
    return HG_OK;
}

static hg_err_t rmq_ops_ensure(hg_client_t *c, transport_state_t *t)
{
    (void)c;
    return rmq_ensure(&t->r); /* guarded inside */
}

static hg_err_t unsupported(rmq_t *r, const char *cmd)
{
    const char *why = strcasecmp(cmd, "TOUCH") == 0
                          ? "a delivery is held until ACK/NACK or the connection ends; there is no lease to renew"
                          : "RabbitMQ has no equivalent";
    return client_fail(r->client, HG_ERR_UNSUPPORTED, "%.32s is not supported on amqp:// (%s; docs/rabbitmq.md)", cmd,
                       why);
}

/* A command, inside its guard (rmq_call). */
static hg_err_t call_guarded(rmq_t *r, size_t argc, const char *const *argv, const size_t *argvlen,
                             uint32_t extra_wait_ms, int flags, resp_reply_t **reply)
{
    const char *cmd = argv[0];
    hg_err_t e;

    if (strcasecmp(cmd, "SEND") == 0)
        return rmq_cmd_send(r, argc, argv, argvlen, reply);
    if (strcasecmp(cmd, "PULL") == 0)
        return rmq_cmd_pull(r, argc, argv, extra_wait_ms, flags, reply);
    if (strcasecmp(cmd, "ACK") == 0)
        return rmq_cmd_ack(r, argc, argv, reply);
    if (strcasecmp(cmd, "NACK") == 0) {
        /* a NACK whose retry came back unrouted is sent again: the sweep
         * binds the topology first, or it comes back again */
        if ((e = rmq_ensure(r)) != HG_OK || (r->rebind && (e = rmq_topology(r)) != HG_OK))
            return e;
        return rmq_cmd_nack(r, argc, argv, reply);
    }
    if (strcasecmp(cmd, "LEVELS") == 0)
        return rmq_cmd_levels(r, reply);
    if (strcasecmp(cmd, "GROUP") == 0)
        return rmq_cmd_group(r, argc, argv, reply);
    if (strcasecmp(cmd, "DLQ") == 0)
        return rmq_cmd_dlq(r, argc, argv, reply);
    if (strcasecmp(cmd, "PING") == 0) {
        buf_t b = BUF_INIT;
        if ((e = rmq_ensure(r)) != HG_OK)
            return e;
        rmq_w_status(&b, "PONG");
        return rmq_reply_finish(&b, reply);
    }
    return unsupported(r, cmd);
}

/* Every command runs guarded (rmq_watchdog.c): a node that stops reading or
 * answering costs a step its timeout, and the stop fd cuts it at once. */
static hg_err_t rmq_call(hg_client_t *c, transport_state_t *t, size_t argc, const char *const *argv,
                         const size_t *argvlen, int resend, uint32_t extra_wait_ms, int flags, resp_reply_t **reply)
{
    hg_err_t e;

    (void)c;
    (void)resend;
    *reply = NULL;
    rmq_guard_enter(&t->r);
    e = call_guarded(&t->r, argc, argv, argvlen, extra_wait_ms, flags, reply);
    rmq_guard_leave(&t->r);
    return e;
}

static void rmq_ops_send_many(hg_client_t *c, transport_state_t *t, hg_send_item_t *items, size_t n)
{
    (void)c;
    rmq_guard_enter(&t->r);
    rmq_send_many(&t->r, items, n);
    rmq_guard_leave(&t->r);
}

static uint64_t rmq_ops_send_bound_ms(const hg_client_t *c, const transport_state_t *t)
{
    (void)c;
    return rmq_send_bound_ms(&t->r);
}

static void rmq_ops_disconnect(transport_state_t *t)
{
    rmq_disconnect(&t->r);
}

static void rmq_ops_before_close(transport_state_t *t)
{
    rmq_guard_enter(&t->r);
    rmq_close_consumer(&t->r);
    rmq_close_politely(&t->r);
    rmq_guard_leave(&t->r);
}

static void rmq_ops_destroy(transport_state_t *t)
{
    if (t == NULL)
        return;
    rmq_disconnect(&t->r);
    rmq_watchdog_free(t->r.watchdog);
    free(t->r.batch_state);
    memset(t, 0, sizeof(*t)); /* the password */
    free(t);
}

const transport_ops_t rmq_transport_ops = {
    .scheme = "amqp://",
    .leases = 0,
    .create = rmq_create,
    .ensure = rmq_ops_ensure,
    .call = rmq_call,
    .send_many = rmq_ops_send_many,
    .send_bound_ms = rmq_ops_send_bound_ms,
    .disconnect = rmq_ops_disconnect,
    .before_close = rmq_ops_before_close,
    .destroy = rmq_ops_destroy,
    .helper_start = rmq_router_start,
    .helper_stop = rmq_router_stop,
};
