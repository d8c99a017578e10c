/*
 * common/metrics_keys.h — the /metrics listener's keys of the daemons: one
 * set of config-table rows (common/cfg.h) for the consumer and the
 * compensator, and one check of their values for every daemon.
 *
 * A program puts `metrics_port` (a number, 0: off), `char *metrics_bind`
 * and `char *metrics_allowed_hosts` in its config struct and
 * METRICS_KEYS_ROWS(its_config_t) in its cfg_key_t table; the keys are
 *   metrics-port           HTTP port for /metrics and /healthz (0: off)
 *   metrics-bind           the address it listens on (required)
 *   metrics-allowed-hosts  the Host names it answers besides its own
 * The broker has rows of its own (its metrics-bind help names allow-remote)
 * but checks the values with metrics_keys_check too.
 *
 * Header only, over libhgcommon (prom.h, http_host.h), which every daemon
 * links. Main thread, at start-up and on SIGHUP.
 */
#ifndef HG_COMMON_METRICS_KEYS_H
#define HG_COMMON_METRICS_KEYS_H

#include <stddef.h>

#include "common/cfg.h"
#include "common/http_guard.h"
#include "common/http_host.h"
#include "common/prom.h"

/* The rows, for a table of the program's config_type (with the fields above). */
#define METRICS_KEYS_ROWS(config_type)                                                                        \
    { CFG_KEY("metrics-port", CFG_INT, "0", 0, 65535, offsetof(config_type, metrics_port),                    \
              "HTTP port for /metrics and /healthz (0: off)") },                                              \
        { CFG_KEY("metrics-bind", CFG_STRING, "127.0.0.1", 0, 0, offsetof(config_type, metrics_bind),         \
                  "address the metrics server listens on: an IP address, or a host name that resolves"),      \
          .required = 1 },                                                                                    \
    {                                                                                                         \
        CFG_KEY(HTTP_GUARD_ALLOWED_KEY, CFG_STRING, NULL, 0, 0, offsetof(config_type, metrics_allowed_hosts), \
                HTTP_GUARD_ALLOWED_HELP),                                                                     \
            .hint = "NAMES", .shown_default = HTTP_GUARD_ALLOWED_SHOWN, .reload = 1                           \
    }

/* The listener's values checked without listening: metrics-bind (only
 * when metrics_on: a metrics-port other than 0) must be an IP address or a
 * name that resolves (prom_check_bind), metrics-allowed-hosts a list of
 * host names (http_hosts_check). Returns NULL, or the key at fault
 * ("metrics-bind" or HTTP_GUARD_ALLOWED_KEY) with err from that check. */
static inline const char *metrics_keys_check(int metrics_on, const char *bind, const char *allowed_hosts, char *err,
                                             size_t errlen)
{
    if (metrics_on && prom_check_bind("metrics-bind", bind, err, errlen) != 0)
        return "metrics-bind";
    if (http_hosts_check(HTTP_GUARD_ALLOWED_KEY, allowed_hosts, err, errlen) != 0)
        return HTTP_GUARD_ALLOWED_KEY;
    return NULL;
}

#endif
