/*
 * broker/settings.c — the config table and its parsers (see settings.h).
 *
 * One row per key: {name, type, default, min, max, offset, help} for the
 * engine in common/cfg.h, which parses the values, the INI file and the flags
 * and writes --help; this file holds the table and the cross-key checks.
 * Runs on the main thread before any other thread starts, but for SIGHUP's
 * config_reload, which runs on the loop thread (settings.h).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "broker/settings.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/units.h"
#include "common/http_guard.h"
#include "common/metrics_keys.h"
#include "common/prom.h"
#include "common/reload.h"
#include "levels/msg.h"

/* levels: the spec must parse (the table itself is filled by config_validate). */
static int check_levels(void *conf, const cfg_key_t *k, const char *value, cfg_source_t source, char *err,
                        size_t errlen);
static int check_dedup_topics(void *conf, const cfg_key_t *k, const char *value, cfg_source_t source, char *err,
                              size_t errlen);

#define OFF(f) offsetof(config_t, f)
#define KB     1024LL
#define MB     (1024LL * 1024)
#define GB     (1024LL * 1024 * 1024)
#define DAY_MS (86400000LL)

/* The table. Keep it in the order of docs/broker.md and etc/hourglass-broker.conf. */
static const cfg_key_t cfg_keys[] = {
    { CFG_KEY(
        "bind", CFG_STRING, "127.0.0.1", 0, 0, OFF(bind),
        "address to listen on; clients from other hosts are served only with users and TLS, or allow-remote yes") },
    { CFG_KEY("port", CFG_INT, "7379", 0, 65535, OFF(port),
              "TCP port for RESP clients (0: none when tls-port is set, else any free port, logged at start-up)") },
    { CFG_KEY("allow-remote", CFG_BOOL, "no", 0, 1, OFF(allow_remote),
              "serve clients from other hosts without users or TLS (protected mode off; a loud warning)") },
    { CFG_KEY("allow-remote-plaintext", CFG_BOOL, "no", 0, 1, OFF(allow_remote_plaintext),
              "with tls-port set, serve clients from other hosts on the plaintext port too (else TLS only)") },
    { CFG_KEY("max-clients", CFG_INT, "10000", 1, 1000000, OFF(max_clients),
              "most client connections; more are told '-ERR max number of clients reached'") },
    { CFG_KEY("idle-timeout", CFG_DURATION, "0", 0, 365 * DAY_MS, OFF(idle_timeout_ms),
              "close a client idle this long (0: never); blocked PULLs are exempt") },
    { CFG_KEY("tcp-backlog", CFG_INT, "511", 1, 65535, OFF(tcp_backlog), "listen(2) backlog") },
    { CFG_KEY("tls-port", CFG_INT, "0", 0, 65535, OFF(tls_port),
              "TCP port for RESP over TLS (0: no TLS); needs tls-cert-file and tls-key-file") },
    { CFG_KEY("tls-max-handshakes-per-address", CFG_INT, "16", 0, 1000000, OFF(tls_max_handshakes_per_address),
              "TLS handshakes one client address (IPv6: its /64) may have in progress; more are closed at once, "
              "before any TLS work (0: no limit)") },
    { CFG_KEY("tls-cert-file", CFG_STRING, NULL, 0, 0, OFF(tls_cert_file),
              "the broker's certificate chain (PEM, leaf first)"),
      .hint = "FILE", .reload = 1 },
    { CFG_KEY("tls-key-file", CFG_STRING, NULL, 0, 0, OFF(tls_key_file),
              "the private key of tls-cert-file (PEM, unencrypted)"),
      .hint = "FILE", .reload = 1 },
    { CFG_KEY("tls-ca-cert-file", CFG_STRING, NULL, 0, 0, OFF(tls_ca_cert_file),
              "CA certificates (PEM) that client certificates must chain to (tls-auth-clients)"),
      .hint = "FILE", .reload = 1 },
    { CFG_KEY("tls-crl-file", CFG_STRING, NULL, 0, 0, OFF(tls_crl_file),
              "CRLs (PEM) of the CAs in tls-ca-cert-file: a client certificate revoked in them, or whose CA has no "
              "CRL there, is refused"),
      .hint = "FILE", .reload = 1 },
    { CFG_KEY("tls-auth-clients", CFG_ENUM, "no", 0, 2, OFF(tls_auth_clients),
              "mutual TLS: yes: a client certificate signed by tls-ca-cert-file is required; optional: checked "
              "when sent; no: not asked for"),
      .words = TLS_AUTH_CLIENTS_WORDS, .reload = 1 },
    { CFG_KEY("tls-auth-clients-user", CFG_ENUM, "off", 0, 1, OFF(tls_auth_clients_user),
              "cn: a verified client certificate logs its connection in as the user its subject's CN names "
              "(users-file; no AUTH needed); off: it logs no one in"),
      .words = TLS_AUTH_CLIENTS_USER_WORDS },
    { CFG_KEY("users-file", CFG_STRING, NULL, 0, 0, OFF(users_file),
              "users, roles and password hashes (docs/security.md); set: every client must AUTH; re-read on SIGHUP"),
      .hint = "FILE" },
    { CFG_KEY("dir", CFG_STRING, "./hourglass-data", 0, 0, OFF(dir),
              "data directory (created if missing; one broker per directory)") },
    { CFG_KEY("levels", CFG_STRING, LVL_DEFAULT_SPEC, 0, 0, OFF(levels),
              "delay level table; must match the one the data directory was created with"),
      .hook = check_levels, .hint = "'SPEC'" },
    { CFG_KEY("fsync", CFG_ENUM, "always", 0, 1, OFF(fsync_always),
              "always: fsync every group commit before replying; no: write only (survives a crash, not a power cut)"),
      .words = "no|always" },
    { CFG_KEY("cache-size", CFG_SIZE, "8mb", 0, 64 * GB, OFF(cache_size), "LevelDB block cache") },
    { CFG_KEY("write-buffer-size", CFG_SIZE, "64mb", 64 * KB, 4 * GB, OFF(write_buffer_size),
              "LevelDB memtable size; the broker holds up to twice this in RAM (DESIGN.md §2: why 64mb)") },
    { CFG_KEY("max-open-files", CFG_INT, "500", 16, 1000000, OFF(max_open_files), "LevelDB table file cache") },
    { CFG_KEY("commitlog-segment-size", CFG_SIZE, "128mb", 64 * KB, 4 * GB, OFF(commitlog_segment_size),
              "size of each commit-log segment file, written out whole before its first use (a multiple of 4kb); a "
              "data directory keeps the size its segments were made with; one segment holds a message of "
              "max-payload twice (record and level entry) plus a quarter segment (11mb for 4mb; checked at load)") },
    { CFG_KEY("disk-reserve", CFG_SIZE, "256mb", 0, 64 * GB, OFF(disk_reserve),
              "space kept in DIR/BALLAST and given back when the disk fills, so the store can reopen and restart; "
              "writes resume once twice this is free, and this plus one commit-log segment; the commit log is "
              "checkpointed every quarter of it (64mb at most), so it is 0 (none) or at least 4mb") },
    { CFG_KEY("backup-dir", CFG_STRING, NULL, 0, 0, OFF(backup_dir),
              "where BACKUP name writes its online copy of the data directory (backup-dir/name); unset: BACKUP "
              "is refused"),
      .hint = "DIR" },
    { CFG_KEY("backup-rate", CFG_SIZE, "32mb", 0, 64 * GB, OFF(backup_rate),
              "most bytes of records a BACKUP copies per second, so that its writes do not hold up the broker's "
              "fsyncs (0: no limit)") },
    { CFG_KEY("damage-retry", CFG_DURATION, "60s", STORE_MIN_DAMAGE_RETRY_MS, STORE_MAX_DAMAGE_RETRY_MS,
              OFF(damage_retry_ms),
              "a level whose due move, or a group's queue whose PULL, fails at its head (damage) is skipped this long, "
              "then tried again; a PULL parked meanwhile is woken then") },
    { CFG_KEY("lease", CFG_DURATION, "30s", 1, DAY_MS, OFF(lease_ms),
              "default lease of a PULLed message (PULL/TOUCH LEASE override it)") },
    { CFG_KEY("lease-write-delay", CFG_DURATION, "100ms", 0, 10000, OFF(lease_write_delay_ms),
              "a lease of a ready message is held in memory this long before it is written; an ACK within it "
              "writes nothing, a crash delivers those messages again at once (0: written at once)") },
    { CFG_KEY("max-reconsume", CFG_INT, "16", 0, 1000, OFF(max_reconsume),
              "failures retried before the DLQ (GROUP CREATE MAXRETRY overrides it per group)") },
    { CFG_KEY("retention", CFG_DURATION, "72h", 1000, 3650 * DAY_MS, OFF(retention_ms),
              "how long a topic with no group keeps due messages") },
    { CFG_KEY("max-delay", CFG_DURATION, "3d", 1000, 3650 * DAY_MS, OFF(max_delay_ms), "longest DELAY / AT accepted") },
    { CFG_KEY("max-pull-count", CFG_INT, "1000", 1, 100000, OFF(max_pull_count),
              "largest PULL COUNT and DLQ LIST COUNT") },
    { CFG_KEY("max-payload", CFG_SIZE, "4mb", 0, (long long)MSG_HARD_MAX_PAYLOAD, OFF(max_payload),
              "largest message payload (at most about 3/8 of commitlog-segment-size: see there)") },
    { CFG_KEY("max-topics", CFG_INT, "10000", 0, 10000000, OFF(max_topics),
              "a SEND, PULL or GROUP CREATE naming a new topic beyond this many topics is refused, naming the "
              "topic and the limit (TOPIC DEL deletes an empty one; 0: no limit)") },
    { CFG_KEY("max-groups", CFG_INT, "10000", 0, 10000000, OFF(max_groups),
              "a PULL or GROUP CREATE naming a new group beyond this many groups is refused, naming the group and "
              "the limit (GROUP DEL deletes one; existing groups are served even when more than this; 0: no limit)") },
    { CFG_KEY("max-pull-bytes", CFG_SIZE, "16mb", 1, 1 * GB, OFF(max_pull_bytes),
              "a PULL or DLQ LIST stops adding messages once their payload, key and reason bytes reach this (fewer "
              "than COUNT; always at least one)") },
    { CFG_KEY("dedup-topics", CFG_STRING, NULL, 0, 0, OFF(dedup_topics),
              "topics whose SENDs with a KEY always deduplicate, as if they said DEDUP (reply: the id; a live "
              "message's with that key instead of a new one); names separated by blanks, * = every topic"),
      .hint = "'TOPIC ...'", .hook = check_dedup_topics, .reload = 1 },
    { CFG_KEY("max-args", CFG_INT, "1024", 3, 1000000, OFF(max_args),
              "most arguments in one command (protocol error and close above)") },
    { CFG_KEY("max-bulk", CFG_SIZE, "8mb", 1 * KB, 1 * GB, OFF(max_bulk),
              "largest single argument (protocol error and close above); >= max-payload") },
    { CFG_KEY("max-inline", CFG_SIZE, "64kb", 256, 64 * MB, OFF(max_inline),
              "longest inline (telnet-style) command line") },
    { CFG_KEY("max-query", CFG_SIZE, "16mb", 4 * KB, 2 * GB, OFF(max_query),
              "most wire bytes of one command; > max-bulk") },
    { CFG_KEY("max-reply-buffer", CFG_SIZE, "64mb", 64 * KB, 64 * GB, OFF(max_reply_buffer),
              "a client with more unread replies than this is disconnected") },
    { CFG_KEY("max-inflight-bytes", CFG_SIZE, "64mb", 64 * KB, 64 * GB, OFF(max_inflight_bytes),
              "request and reply bytes one client may have awaiting the storage thread or the socket before its "
              "commands wait; >= max-query") },
    { CFG_KEY("max-client-memory", CFG_SIZE, "512mb", 0, 1024 * GB, OFF(max_client_memory),
              "memory all clients together may hold (query buffers, requests in flight, replies); above it the "
              "client holding most is closed (0: no limit)") },
    { CFG_KEY("header-timeout", CFG_DURATION, "10s", 0, DAY_MS, OFF(header_timeout_ms),
              "close a client whose command is not complete this long after its first byte (0: never); "
              "independent of idle-timeout") },
    { CFG_KEY("auth-timeout", CFG_DURATION, "10s", 0, DAY_MS, OFF(auth_timeout_ms),
              "with users-file: close a client not logged in this long after it connected, or after a users reload "
              "logged it out (0: never); an AUTH being checked is waited for") },
    { CFG_KEY("metrics-port", CFG_INT, "0", 0, 65535, OFF(metrics_port),
              "HTTP port for /metrics and /healthz (0: off)") },
    { CFG_KEY("metrics-bind", CFG_STRING, "127.0.0.1", 0, 0, OFF(metrics_bind),
              "address of the metrics listener; non-loopback needs allow-remote yes") },
    { CFG_KEY(HTTP_GUARD_ALLOWED_KEY, CFG_STRING, NULL, 0, 0, OFF(metrics_allowed_hosts), HTTP_GUARD_ALLOWED_HELP),
      .hint = "NAMES", .shown_default = HTTP_GUARD_ALLOWED_SHOWN, .reload = 1 },
    { CFG_KEY("metrics-max-topics", CFG_INT, "100", 0, 100000, OFF(metrics_max_topics),
              "/metrics carries per-topic series (and per-group series of their groups) for at most this many "
              "topics, the first in name order; the rest are counted in hourglass_metrics_topics_omitted") },
    LOG_KEYS_ROWS(config_t),
};

_Static_assert(sizeof cfg_keys / sizeof cfg_keys[0] <= CONFIG_MAX_KEYS, "raise CONFIG_MAX_KEYS");

static const char *const sections[] = { "broker", NULL };

static const cfg_table_t table = {
    .program = "hourglass-broker",
    .keys = cfg_keys,
    .count = sizeof cfg_keys / sizeof cfg_keys[0],
    .sections = sections,
    .positional_config = 1,
    .strings_nonempty = 1,
};

static int check_levels(void *conf, const cfg_key_t *k, const char *value, cfg_source_t source, char *err,
                        size_t errlen)
{
    (void)conf, (void)source;
    lvl_table_t t;
    char lerr[256];
    if (lvl_table_parse(value, &t, lerr, sizeof lerr) != 0) {
        err_set(err, errlen, "%s: %s", k->name, lerr);
        return -1;
    }
    return 0;
}

/* ---- dedup-topics ------------------------------------------------------ */

/* The next name of a dedup-topics list from *p (blanks between: a topic
 * name holds no blank, but may hold a comma): 1 with *name / *len, 0 at the
 * end. */
static int next_topic_name(const char **p, const char **name, size_t *len)
{
    const char *s = *p;
    while (*s == ' ' || *s == '\t') {
        s++;
    }
    if (*s == '\0') {
        return 0;
    }
    *name = s;
    while (*s != '\0' && *s != ' ' && *s != '\t') {
        s++;
    }
    *len = (size_t)(s - *name);
    *p = s;
    return 1;
}

static int check_dedup_topics(void *conf, const cfg_key_t *k, const char *value, cfg_source_t source, char *err,
                              size_t errlen)
{
    (void)conf, (void)source;
    const char *p = value, *name;
    size_t len;
    while (next_topic_name(&p, &name, &len)) {
        char nerr[200];
        if (!(len == 1 && name[0] == '*') && msg_check_name("topic", name, len, nerr, sizeof nerr) != 0) {
            return err_set(err, errlen, "%s: %s", k->name, nerr);
        }
    }
    return 0;
}

int config_dedup_topic(const config_t *c, const char *topic, size_t len)
{
    return config_topic_listed(c->dedup_topics, topic, len);
}

int config_topic_listed(const char *list, const char *topic, size_t len)
{
    const char *p = list, *name;
    size_t n;
    while (p != NULL && next_topic_name(&p, &name, &n)) {
        if ((n == 1 && name[0] == '*') || (n == len && memcmp(name, topic, len) == 0)) {
            return 1;
        }
    }
    return 0;
}

int config_key_count(void)
{
    return (int)table.count;
}
const char *config_key_name(int i)
{
    return (i >= 0 && i < (int)table.count) ? cfg_keys[i].name : NULL;
}
void config_key_value(const config_t *c, int i, char *buf, size_t len)
{
    if (i >= 0 && i < (int)table.count) {
        cfg_value_text(&table, c, (size_t)i, buf, len);
    } else if (len > 0) {
        buf[0] = '\0';
    }
}

void config_init_defaults(config_t *c)
{
    memset(c, 0, sizeof *c);
    cfg_init(&table, c);
    store_options_default(&c->store);
}

uint64_t config_checkpoint_bytes(uint64_t disk_reserve)
{
    uint64_t quarter = disk_reserve / CONFIG_RESERVE_CHECKPOINTS;
    return disk_reserve == 0 || quarter > STORE_CHECKPOINT_BYTES ? STORE_CHECKPOINT_BYTES : quarter;
}

/* The store's options from the keys: the one place they are copied. */
static void fill_store_options(config_t *c)
{
    store_options_t *o = &c->store;
    o->path = c->dir;
    o->create_if_missing = 1;
    o->sync = c->fsync_always;
    o->retention_ms = (uint64_t)c->retention_ms;
    o->max_delay_ms = (uint64_t)c->max_delay_ms;
    o->max_payload = (uint32_t)c->max_payload;
    o->max_reconsume = (uint32_t)c->max_reconsume;
    o->max_lease_bytes = (uint64_t)c->max_pull_bytes;
    o->cache_bytes = (size_t)c->cache_size;
    o->write_buffer_bytes = (size_t)c->write_buffer_size;
    o->max_open_files = (int)c->max_open_files;
    o->segment_bytes = (uint64_t)c->commitlog_segment_size;
    o->checkpoint_bytes = config_checkpoint_bytes((uint64_t)c->disk_reserve);
    o->checkpoint_on_thread = 1; /* its syncs beside the storage thread's work, not in it */
    o->max_topics = (uint64_t)c->max_topics;
    o->max_groups = (uint64_t)c->max_groups;
    o->lease_write_delay_ms = (uint64_t)c->lease_write_delay_ms;
    o->damage_retry_ms = (uint64_t)c->damage_retry_ms;
}

void config_free(config_t *c)
{
    cfg_free(&table, c);
}

int config_tls_enabled(const config_t *c)
{
    return c->tls_port != 0;
}

/* The tls-* keys: a TLS port needs a certificate and its key, mutual TLS a
 * CA, and the ports must differ. */
static int config_validate_tls(const config_t *c, char *err, size_t errlen)
{
    if (c->tls_port == 0) {
        if (c->tls_auth_clients != TLS_AUTH_NO) {
            return err_set(err, errlen, "tls-auth-clients is set but tls-port is 0 (TLS is off)");
        }
        if (c->tls_crl_file != NULL) {
            return err_set(err, errlen, "tls-crl-file is set but tls-port is 0 (TLS is off)");
        }
        if (c->tls_auth_clients_user != TLS_USER_OFF) {
            return err_set(err, errlen, "tls-auth-clients-user is set but tls-port is 0 (TLS is off)");
        }
        return 0;
    }
    if (c->tls_cert_file == NULL || c->tls_key_file == NULL) {
        return err_set(err, errlen, "tls-port %lld needs tls-cert-file and tls-key-file", c->tls_port);
    }
    if (c->tls_auth_clients != TLS_AUTH_NO && c->tls_ca_cert_file == NULL) {
        return err_set(err, errlen, "tls-auth-clients %s needs tls-ca-cert-file (the CA client certificates chain to)",
                       c->tls_auth_clients == TLS_AUTH_YES ? "yes" : "optional");
    }
    if (c->tls_auth_clients_user == TLS_USER_CN && (c->tls_auth_clients == TLS_AUTH_NO || c->users_file == NULL)) {
        return err_set(err, errlen,
                       "tls-auth-clients-user cn needs tls-auth-clients yes or optional and a users-file "
                       "(the CN names one of its users)");
    }
    if (c->tls_crl_file != NULL && c->tls_auth_clients == TLS_AUTH_NO) {
        return err_set(err, errlen,
                       "tls-crl-file is set but tls-auth-clients is no (CRLs are checked on client certificates)");
    }
    if (c->tls_port == c->port) {
        return err_set(err, errlen, "tls-port %lld is the same as port", c->tls_port);
    }
    if (c->metrics_port != 0 && c->metrics_port == c->tls_port && strcmp(c->bind, c->metrics_bind) == 0) {
        return err_set(err, errlen, "metrics-port %lld is the same as tls-port", c->metrics_port);
    }
    return 0;
}

int config_validate(config_t *c, char *err, size_t errlen)
{
    char lerr[256];
    if (lvl_table_parse(c->levels, &c->store.levels, lerr, sizeof lerr) != 0) {
        err_set(err, errlen, "levels: %s", lerr);
        return -1;
    }
    if (c->max_bulk < c->max_payload) {
        err_set(err, errlen, "max-bulk (%lld) must be at least max-payload (%lld): a payload is one bulk argument",
                c->max_bulk, c->max_payload);
        return -1;
    }
    if (c->max_query <= c->max_bulk) {
        err_set(err, errlen, "max-query (%lld) must be larger than max-bulk (%lld)", c->max_query, c->max_bulk);
        return -1;
    }
    if (c->max_inflight_bytes < c->max_query) {
        err_set(err, errlen, "max-inflight-bytes (%lld) must be at least max-query (%lld): one command must fit",
                c->max_inflight_bytes, c->max_query);
        return -1;
    }
    if (c->max_client_memory != 0 && c->max_client_memory < c->max_query) {
        err_set(err, errlen, "max-client-memory (%lld) must be 0 or at least max-query (%lld)", c->max_client_memory,
                c->max_query);
        return -1;
    }
    if ((uint64_t)c->max_delay_ms > LVL_MAX_DURATION_MS) {
        err_set(err, errlen, "max-delay is too long");
        return -1;
    }
    /* An address that cannot be listened on is said here, so --check-config catches it too. */
    if (prom_check_bind("bind", c->bind, err, errlen) != 0 ||
        metrics_keys_check(c->metrics_port != 0, c->metrics_bind, c->metrics_allowed_hosts, err, errlen) != NULL) {
        return -1;
    }
    if (c->metrics_port != 0 && !c->allow_remote && !cfg_bind_is_loopback(c->metrics_bind)) {
        err_set(err, errlen, "metrics-bind %s is not a loopback address; set allow-remote yes to listen there anyway",
                c->metrics_bind);
        return -1;
    }
    if (config_validate_tls(c, err, errlen) != 0) {
        return -1;
    }
    if (c->metrics_port != 0 && c->metrics_port == c->port && strcmp(c->bind, c->metrics_bind) == 0) {
        err_set(err, errlen, "metrics-port %lld is the same as port", c->metrics_port);
        return -1;
    }
    if (c->disk_reserve != 0 && (uint64_t)c->disk_reserve < CONFIG_RESERVE_CHECKPOINTS * STORE_CHECKPOINT_MIN_BYTES) {
        char have[32], need[32];
        units_format_size((uint64_t)c->disk_reserve, have, sizeof have);
        units_format_size(CONFIG_RESERVE_CHECKPOINTS * STORE_CHECKPOINT_MIN_BYTES, need, sizeof need);
        err_set(err, errlen,
                "disk-reserve %s is below %s: the commit log is checkpointed every quarter of disk-reserve (at least "
                "every %llu bytes) so that the store's reopen on a full disk redoes no more log than the reserve "
                "gives room for; set %s or more, or 0 for no reserve",
                have, need, (unsigned long long)STORE_CHECKPOINT_MIN_BYTES, need);
        return -1;
    }
    if (store_check_segment_bytes((uint64_t)c->commitlog_segment_size, lerr, sizeof lerr) != 0) {
        err_set(err, errlen, "commitlog-segment-size: %s", lerr);
        return -1;
    }
    char perr[512];
    if (store_check_payload_room((uint64_t)c->commitlog_segment_size, (uint32_t)c->max_payload, perr, sizeof perr) !=
        0) {
        char seg[32], pay[32];
        units_format_size((uint64_t)c->commitlog_segment_size, seg, sizeof seg);
        units_format_size((uint64_t)c->max_payload, pay, sizeof pay);
        err_set(err, errlen, "commitlog-segment-size %s is too small for max-payload %s: %s", seg, pay, perr);
        return -1;
    }
    fill_store_options(c);
    return 0;
}

/* ---- the command line --------------------------------------------------- */

int config_load(config_t *c, int argc, char **argv, config_action_t *action, char *err, size_t errlen)
{
    static const config_action_t actions[] = {
        [CFG_RUN] = CONFIG_RUN,
        [CFG_CHECK] = CONFIG_CHECK,
        [CFG_HELP] = CONFIG_HELP,
        [CFG_VERSION] = CONFIG_VERSION,
    };
    cfg_args_t args;
    *action = CONFIG_RUN;
    /* --check-data DIR is an action with a value, which the engine's
     * valueless switches cannot carry: take it out of argv first. */
    char **rest = xmalloc(((size_t)argc + 1) * sizeof *rest);
    int nrest = 0;
    c->check_data = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (i > 0 && strcmp(a, "--check-data") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0') {
                free(rest);
                return err_set(err, errlen, "--check-data needs a data directory");
            }
            if (strncmp(argv[i + 1], "--", 2) == 0) { /* "--check-data --dir D": D is not the value */
                err_set(err, errlen,
                        "--check-data takes the data directory right after it (--check-data DIR), not the option "
                        "'%s' (a directory of that name: --check-data ./%s)",
                        argv[i + 1], argv[i + 1]);
                free(rest);
                return -1;
            }
            c->check_data = argv[++i];
        } else if (i > 0 && strncmp(a, "--check-data=", 13) == 0) {
            if (a[13] == '\0') {
                free(rest);
                return err_set(err, errlen, "--check-data needs a data directory");
            }
            c->check_data = a + 13;
        } else {
            rest[nrest++] = argv[i];
        }
    }
    rest[nrest] = NULL;
    int rc = cfg_parse_args(&table, c, nrest, rest, &args, err, errlen);
    free(rest);
    if (rc != 0) {
        return -1;
    }
    *action = actions[args.action];
    c->config_path = args.config_path;
    if (args.action == CFG_HELP || args.action == CFG_VERSION) {
        return 0;
    }
    if (c->check_data != NULL) {
        if (args.action == CFG_CHECK) {
            return err_set(err, errlen, "--check-data and --check-config exclude each other");
        }
        free(c->dir);
        c->dir = xstrdup(c->check_data);
        *action = CONFIG_CHECK_DATA;
    }
    return config_validate(c, err, errlen);
}

/* ---- SIGHUP (common/reload.h) --------------------------------------------- */

static int reload_load(void *conf, int argc, char **argv, char *err, size_t errlen)
{
    config_action_t action;
    config_init_defaults(conf);
    return config_load(conf, argc, argv, &action, err, errlen);
}

static void reload_release(void *conf)
{
    config_free(conf);
}

static const reload_program_t reload_program = { sizeof(config_t), reload_load, reload_release };

int config_reload(config_t *c, int argc, char **argv)
{
    return reload_config(&table, c, &reload_program, argc, argv);
}

void config_print_help(FILE *out, const char *prog)
{
    fprintf(out,
            "Usage: %s [--config FILE] [--KEY VALUE ...]\n"
            "       %s --check-config [--config FILE] [--KEY VALUE ...]\n"
            "       %s --check-data DIR [--config FILE] [--KEY VALUE ...]\n"
            "       %s --help | --version\n\n"
            "hourglass-broker %s: a RocketMQ-style delay broker speaking RESP (redis-cli works).\n\n"
            "Every key can be set in the INI file (key = value, at the top or under [broker])\n"
            "or as a flag --key value (or --key=value); flags win over the file.\n"
            "  --config FILE    read FILE (also the only positional argument)\n"
            "  --check-config   validate the configuration, print it, exit 0 (valid) or 2\n"
            "  --check-data DIR check the data directory DIR (of a stopped broker) with the\n"
            "                   configured levels: print \"ok: N messages, ...\" and exit 0,\n"
            "                   or print the first problem and exit 1 (damaged or\n"
            "                   inconsistent: restore it) or 3 (not checked: missing,\n"
            "                   not accessible, in use, not a data directory); it writes\n"
            "                   nothing in DIR (it checks a scratch view beside it, removed\n"
            "                   after; SIGINT/SIGTERM remove it too and exit 128+signal)\n"
            "  --help           this text\n"
            "  --version        print the version\n\nKeys (default in brackets):\n",
            prog, prog, prog, prog, PACKAGE_VERSION);
    cfg_print_keys(&table, out);
}

int config_print(const config_t *c, FILE *out)
{
    return cfg_print_check(&table, c, PACKAGE_VERSION, "broker", c->config_path, out, stderr);
}
